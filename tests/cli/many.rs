//! Many processes on one store, SQLite and PostgreSQL each: eight `reel run` loops and two
//! `reel worker`s, with timers, signals sent while runs wait, and cancels, a few hundred runs
//! in all.
//!
//! Every effect call of every flow appends `STEP KEY MS` to `calls.log` (`MS`: when it began;
//! the runs share one directory), so the test sees every invocation. Afterwards it checks,
//! from the journals (`reel events --json`), the log and the stderr of every process: no run
//! lost, no event lost or duplicated, every journal gapless, no run taken up by two processes
//! at once, no effect made twice, no store error (`database is locked` above all) reaching a
//! user, and every run ended as its flow and the test's actions say.
//!
//! A second test does the same with SIGKILLs among the processes: some `reel run`s and one
//! worker (`REEL_KILL_WORKERS=N`: N, one after the other) are killed at random moments (the
//! seed is printed; `REEL_CRASH_SEED=N` repeats it), a worker is started in each killed one's
//! place, and the workers finish every run. An effect
//! may then be made twice, but only one in flight at a kill, never after its result or its
//! step's success was recorded.
//!
//! On PostgreSQL the processes share one machine as they share the store, so a worker takes
//! up a run whose holder died as soon as it sees the process gone, as on SQLite, rather than
//! when the lease runs out (the lease is for holders on other machines).

// edge: the test drives real processes and bounds its waits with the real clock.
#![allow(clippy::disallowed_methods)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
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
    cmd: ["sh", "-c", "echo \"a $REEL_IDEMPOTENCY_KEY $(date +%s%3N)\" >> calls.log; echo $1", "sh", to_string(input.n)]
  }
  step nap = sleep {
    for: 150ms
    after: [a]
  }
  step b = exec {
    foreach: [1, 2]
    after: [nap]
    cmd: ["sh", "-c", "echo \"b $REEL_IDEMPOTENCY_KEY $(date +%s%3N)\" >> calls.log; echo $(( $1 * $2 ))", "sh", to_string(a.json), to_string(item)]
  }
  output { n: input.n, b: [for x in b: x.json] }
}
"#;

/// A signal wait: the run parks until the test sends `go`, then makes an effect of its payload.
const SIGNAL: &str = r#"flow signaled {
  input n: int
  step a = exec {
    cmd: ["sh", "-c", "echo \"a $REEL_IDEMPOTENCY_KEY $(date +%s%3N)\" >> calls.log; echo $1", "sh", to_string(input.n)]
  }
  step go = signal {
    name: "go"
    timeout: 1d
    after: [a]
  }
  step b = exec {
    cmd: ["sh", "-c", "echo \"b $REEL_IDEMPOTENCY_KEY $(date +%s%3N)\" >> calls.log; echo $(( $1 + $2 ))", "sh", to_string(a.json), to_string(go.v)]
  }
  output { n: input.n, b: b.json }
}
"#;

/// Canceled: a short sleep, then a wait for a signal that never comes; the test cancels it
/// as soon as `reel run` returns, so the cancel meets it parked or held by a worker.
const CANCELED: &str = r#"flow canceled {
  input n: int
  step a = exec {
    cmd: ["sh", "-c", "echo \"a $REEL_IDEMPOTENCY_KEY $(date +%s%3N)\" >> calls.log; echo $1", "sh", to_string(input.n)]
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
    cmd: ["sh", "-c", "echo \"b $REEL_IDEMPOTENCY_KEY $(date +%s%3N)\" >> calls.log"]
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
fn reel_kept(dir: &Path, home: &Home, args: &[&str], stderrs: &Stderrs) -> Run {
    let mut command = reel(dir, args);
    command.env(home.var, &home.value);
    let r = run(command);
    stderrs
        .lock()
        .unwrap()
        .push((args.join(" "), r.stderr.clone()));
    r
}

/// One runner: starts its runs one after the other, and signals or cancels each that waits.
fn runner(dir: &Path, home: &Home, which: usize, stderrs: &Stderrs) -> Vec<(String, Expected)> {
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
fn start_worker(dir: &Path, home: &Home, err: &Path) -> Child {
    let mut command = reel(dir, &["worker", "--poll-ms", "20"]);
    command
        .env(home.var, &home.value)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fs::File::create(err).unwrap());
    command.spawn().expect("reel worker starts")
}

/// The statuses of every run of the store, by id, each journal read for holes.
fn statuses(dir: &Path, home: &Home) -> BTreeMap<String, Value> {
    let r = reel_env(
        dir,
        &["runs", "--json", "--check", "--limit", "100000"],
        &[home.env()],
    );
    assert_eq!(r.status, 0, "{r:?}");
    json(&r)
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["run"].as_str().unwrap().to_string(), r.clone()))
        .collect()
}

/// Waits up to `limit` for every run of the store to have ended; on time, their rows, else the
/// runs still open and the first one's journal, for the caller's report.
fn wait_all_ended(
    dir: &Path,
    home: &Home,
    limit: Duration,
) -> Result<BTreeMap<String, Value>, (Vec<Value>, String)> {
    let deadline = Instant::now() + limit;
    loop {
        let rows = statuses(dir, home);
        let open: Vec<Value> = rows
            .values()
            .filter(|r| {
                !matches!(
                    r["status"].as_str(),
                    Some("succeeded" | "canceled" | "failed")
                )
            })
            .cloned()
            .collect();
        if open.is_empty() {
            return Ok(rows);
        }
        if Instant::now() >= deadline {
            let id = open[0]["run"].as_str().unwrap();
            let events = reel_env(dir, &["events", id], &[home.env()]);
            return Err((open, events.stdout));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(unix)]
#[test]
fn eight_runners_and_two_workers_share_one_store_without_losing_or_doubling_anything() {
    share_one_store(Store::Sqlite, None);
}

#[cfg(unix)]
#[test]
fn eight_runners_and_two_workers_share_one_postgres_store_without_losing_or_doubling_anything() {
    share_one_store(Store::Postgres, None);
}

#[cfg(unix)]
#[test]
fn eight_runners_and_two_workers_lose_and_double_nothing_while_postgres_ends_their_sessions() {
    share_one_store(Store::Postgres, Some(SESSIONS_ENDED_EVERY));
}

/// How often the test that ends sessions ends every session of its database (as a restart,
/// a failover or an administrator would), while the runners run and the workers finish.
const SESSIONS_ENDED_EVERY: Duration = Duration::from_millis(250);

/// Eight runners and two workers on one store of kind `store`, then the checks. With `ends`,
/// every session of the store's database is ended that often meanwhile.
fn share_one_store(store: Store, ends: Option<Duration>) {
    let dir = temp();
    let home = Home::new(store, dir.path());
    for (file, text) in FLOWS {
        write(dir.path(), file, text);
    }
    let stderrs: Stderrs = Mutex::new(Vec::new());
    let began = Instant::now();
    let stop_ending = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ender = ends.map(|every| {
        let (stop, url) = (stop_ending.clone(), home.value.clone());
        std::thread::spawn(move || {
            let (mut admin, name) = crate::postgres::admin(&url);
            let mut ended = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                std::thread::sleep(every);
                ended += crate::postgres::end_sessions(&mut admin, &name);
            }
            ended
        })
    });

    let reaper = Reaper::default();
    let mut workers: Vec<(Child, std::path::PathBuf)> = (0..WORKERS)
        .map(|w| {
            let err = dir.path().join(format!("worker{w}.err"));
            (start_worker(dir.path(), &home, &err), err)
        })
        .collect();
    for (child, _) in &workers {
        reaper.keep(child);
    }
    let started: Vec<(String, Expected)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..RUNNERS)
            .map(|k| {
                let (d, h, e) = (dir.path(), &home, &stderrs);
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
    let rows = wait_all_ended(dir.path(), &home, Duration::from_secs(60)).unwrap_or_else(
        |(open, events)| {
            let workers: Vec<String> = workers
                .iter()
                .map(|(_, err)| fs::read_to_string(err).unwrap_or_default())
                .collect();
            panic!(
                "{} runs are still open a minute after the runners ended: {open:#?}\nthe first's journal: {events}\nworkers: {workers:#?}",
                open.len()
            )
        },
    );
    stop_ending.store(true, std::sync::atomic::Ordering::SeqCst);
    let sessions_ended = ender.map(|e| e.join().expect("the session ender panicked"));
    for (child, _) in &mut workers {
        // SAFETY: kill only sends a signal, to a child not yet waited for (its id is still ours).
        let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(rc, 0);
    }
    let mut worker_pids = BTreeSet::new();
    for (mut child, err) in workers {
        let pid = child.id();
        reaper.forget(&child);
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
        let (_, key, _) = log_line(line);
        *invocations.entry(key.to_string()).or_default() += 1;
    }
    let mut recorded_keys = BTreeSet::new();
    let mut resumed_by: BTreeMap<String, usize> = BTreeMap::new();
    let mut spurious = 0;
    for (id, e) in &expected {
        let r = reel_env(dir.path(), &["events", id, "--json"], &[home.env()]);
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
            let shown = reel_env(dir.path(), &["resume", id, "--json"], &[home.env()]);
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

    // Nothing a user sees speaks of a store error; but for a worker's word that the store
    // could not be reached and then answered again, while sessions were being ended.
    let stderrs = stderrs.into_inner().unwrap();
    let mut away_said = 0;
    for (what, text) in &stderrs {
        let kept: Vec<&str> = text
            .lines()
            .filter(|line| {
                let away = ends.is_some()
                    && what.starts_with("worker")
                    && (line.starts_with("the store cannot be reached")
                        || line.starts_with("the store answers again"));
                away_said += usize::from(away);
                !away
            })
            .collect();
        let lower = kept.join("\n").to_lowercase();
        for bad in ["locked", "busy", "store.", "error", "lease", "panicked"] {
            assert!(!lower.contains(bad), "`reel {what}` said `{bad}`:\n{text}");
        }
        // A worker meeting a run another process holds has nothing to say about it.
        if what.starts_with("worker") {
            assert!(!lower.contains("held by"), "`reel {what}`:\n{text}");
        }
    }
    eprintln!(
        "{} runs ({} timers, {} signaled, {} canceled), {} effects, {} processes; runners took {runners_took:?}, all {:?}; resumes by worker: {resumed_by:?}, {spurious} of them found nothing due; sessions ended: {sessions_ended:?}, workers' words of it: {away_said}",
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

/// A line of `calls.log`: the step, the idempotency key and when the call began (ms).
fn log_line(line: &str) -> (&str, &str, i64) {
    let mut parts = line.split(' ');
    let (Some(step), Some(key), Some(ms)) = (parts.next(), parts.next(), parts.next()) else {
        panic!("a log line is `STEP KEY MS`: {line}");
    };
    (step, key, ms.parse().expect("MS is a number"))
}

/// An event's time, in ms since the epoch.
fn at_ms(event: &Value) -> i64 {
    let at: jiff::Timestamp = event["at"].as_str().unwrap().parse().unwrap();
    at.as_millisecond()
}

/// Runners of the SIGKILL test.
const KILL_RUNNERS: usize = 6;
/// Runs each of its runners starts.
const KILL_RUNS_PER_RUNNER: usize = 12;

/// What a `reel run` of the SIGKILL test came to.
enum Started {
    /// It returned: the run waits, and the runner signaled or canceled it.
    Returned(String),
    /// It was killed: whether a run was created, and of what, is for the store to say.
    Killed(u32),
}

/// One runner of the SIGKILL test: starts its runs one after the other and kills about one in
/// three at a random moment; signals or cancels each that returned.
fn killing_runner(
    dir: &Path,
    home: &Home,
    which: usize,
    seed: u64,
    stderrs: &Stderrs,
    done: &std::sync::atomic::AtomicUsize,
) -> Vec<Started> {
    let mut rng = StdRng::seed_from_u64(seed ^ (which as u64 + 1).wrapping_mul(0x9e37_79b9));
    let mut started = Vec::new();
    let mut last: Option<Duration> = None;
    for i in 0..KILL_RUNS_PER_RUNNER {
        let n = (which * KILL_RUNS_PER_RUNNER + i) as i64;
        let (flow, _) = FLOWS[(which + i) % FLOWS.len()];
        let durability = if i % 2 == 0 { "fast" } else { "durable" };
        let input = format!("n={n}");
        let args = [
            "run",
            flow,
            "--input",
            &input,
            "--durability",
            durability,
            "--json",
        ];
        let out = dir.join(format!("run-{which}-{i}.out"));
        let err = dir.join(format!("run-{which}-{i}.err"));
        let mut command = reel(dir, &args);
        command
            .env(home.var, &home.value)
            .stdin(Stdio::null())
            .stdout(fs::File::create(&out).unwrap())
            .stderr(fs::File::create(&err).unwrap());
        let mut child = command.spawn().expect("reel run starts");
        let pid = child.id();
        // A kill lands somewhere in what a `reel run` takes on this machine now (the last one
        // this runner let end), so that it meets runs starting, running and parking.
        let began = Instant::now();
        let kill_at = (last.is_some() && rng.random_ratio(1, 3)).then(|| {
            let span = last.unwrap_or_default().as_millis() as u64;
            began + Duration::from_millis(rng.random_range(span * 2 / 3..=span + span / 10))
        });
        let killed = loop {
            if child.try_wait().unwrap().is_some() {
                break false;
            }
            if kill_at.is_some_and(|t| Instant::now() >= t) {
                // SAFETY: kill only sends a signal, to a child not yet waited for.
                let rc = unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                assert_eq!(rc, 0);
                // Waited for at once: a zombie would pass for a live holder.
                child.wait().unwrap();
                break true;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let text = fs::read_to_string(&err).unwrap();
        stderrs.lock().unwrap().push((args.join(" "), text));
        done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if killed {
            started.push(Started::Killed(pid));
            continue;
        }
        let r = Run {
            status: child.wait().unwrap().code().unwrap(),
            stdout: fs::read_to_string(&out).unwrap(),
            stderr: fs::read_to_string(&err).unwrap(),
        };
        assert_eq!(r.status, 0, "{flow} n={n}: {r:?}");
        last = Some(began.elapsed());
        let o = json(&r);
        assert_eq!(o["status"], "waiting", "{flow} n={n}: {o}");
        let id = o["run"].as_str().unwrap().to_string();
        if flow == "signal.reel" {
            let payload = json!({ "v": n * 10 }).to_string();
            let s = reel_kept(dir, home, &["signal", &id, "go", &payload], stderrs);
            assert_eq!(s.status, 0, "signal {id}: {s:?}");
        } else if flow == "cancel.reel" {
            let c = reel_kept(dir, home, &["cancel", &id], stderrs);
            assert_eq!(c.status, 0, "cancel {id}: {c:?}");
        }
        started.push(Started::Returned(id));
    }
    started
}

/// The workers a test started and has not waited for: killed if the test fails, so that none
/// outlives it. A pid leaves the list when the test waits for it (then it may be reused).
#[derive(Default)]
struct Reaper(Mutex<BTreeSet<u32>>);

impl Reaper {
    /// Keeps `child` to be killed should the test fail.
    fn keep(&self, child: &Child) {
        self.0.lock().unwrap().insert(child.id());
    }

    /// Forgets `child`: the test is about to wait for it.
    fn forget(&self, child: &Child) {
        self.0.lock().unwrap().remove(&child.id());
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        for pid in self.0.lock().unwrap().iter() {
            // SAFETY: kill only sends a signal, to a child the test has not waited for.
            unsafe { libc::kill(*pid as libc::pid_t, libc::SIGKILL) };
        }
    }
}

/// Sends SIGKILL to `child` and waits for it.
fn kill9(child: &mut Child) {
    // SAFETY: kill only sends a signal, to a child not yet waited for (its id is still ours).
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
    assert_eq!(rc, 0);
    child.wait().unwrap();
}

#[cfg(unix)]
#[test]
fn runs_and_a_worker_killed_at_random_moments_lose_and_double_nothing() {
    kill_at_random(Store::Sqlite);
}

#[cfg(unix)]
#[test]
fn runs_and_a_worker_killed_at_random_moments_on_postgres_lose_and_double_nothing() {
    kill_at_random(Store::Postgres);
}

/// The SIGKILL test on one store of kind `store`.
fn kill_at_random(store: Store) {
    let seed: u64 = std::env::var("REEL_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("seed {seed} (REEL_CRASH_SEED={seed} repeats it)");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = temp();
    let home = Home::new(store, dir.path());
    for (file, text) in FLOWS {
        write(dir.path(), file, text);
    }
    let stderrs: Stderrs = Mutex::new(Vec::new());
    let began = Instant::now();

    let reaper = Reaper::default();
    let mut workers: Vec<(Child, std::path::PathBuf)> = (0..WORKERS)
        .map(|w| {
            let err = dir.path().join(format!("worker{w}.err"));
            (start_worker(dir.path(), &home, &err), err)
        })
        .collect();
    for (child, _) in &workers {
        reaper.keep(child);
    }
    // The first worker is killed at a random moment while the runners run (once a random
    // share of the runs was started); another takes its place a little later.
    let total = KILL_RUNNERS * KILL_RUNS_PER_RUNNER;
    // `REEL_KILL_WORKERS=N` kills N workers one after the other (the long form); 1 by default.
    let worker_kills: usize = std::env::var("REEL_KILL_WORKERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let mut kill_worker_at: Vec<usize> = (0..worker_kills)
        .map(|_| rng.random_range(total / 5..total * 7 / 10))
        .collect();
    kill_worker_at.sort();
    let done = std::sync::atomic::AtomicUsize::new(0);
    let mut killed_pids: BTreeSet<u32> = BTreeSet::new();
    let started: Vec<Started> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..KILL_RUNNERS)
            .map(|k| {
                let (d, h, e, n) = (dir.path(), &home, &stderrs, &done);
                s.spawn(move || killing_runner(d, h, k, seed, e, n))
            })
            .collect();
        for (k, at) in kill_worker_at.iter().enumerate() {
            // A runner that failed never counts its runs: its panic is reported below.
            while done.load(std::sync::atomic::Ordering::SeqCst) < *at
                && !handles.iter().all(|h| h.is_finished())
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            let (mut oldest, err) = workers.remove(0);
            killed_pids.insert(oldest.id());
            reaper.forget(&oldest);
            kill9(&mut oldest);
            let text = fs::read_to_string(&err).unwrap();
            stderrs.lock().unwrap().push(("killed worker".into(), text));
            std::thread::sleep(Duration::from_millis(rng.random_range(100..1000)));
            let err = dir.path().join(format!("worker-restarted{k}.err"));
            let worker = start_worker(dir.path(), &home, &err);
            reaper.keep(&worker);
            workers.push((worker, err));
        }
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a runner panicked"))
            .collect()
    });
    let returned: BTreeSet<String> = started
        .iter()
        .filter_map(|s| match s {
            Started::Returned(id) => Some(id.clone()),
            Started::Killed(_) => None,
        })
        .collect();
    for s in &started {
        if let Started::Killed(pid) = s {
            killed_pids.insert(*pid);
        }
    }
    let killed_runs = started.len() - returned.len();

    // The runs whose `reel run` was killed: signal or cancel what their runner could not.
    let rows = statuses(dir.path(), &home);
    for (id, row) in &rows {
        if returned.contains(id) {
            continue;
        }
        let r = match row["flow"].as_str().unwrap() {
            "signaled" => reel_kept(
                dir.path(),
                &home,
                &["signal", id, "go", r#"{"v": 0}"#],
                &stderrs,
            ),
            "canceled" => reel_kept(dir.path(), &home, &["cancel", id], &stderrs),
            _ => continue,
        };
        assert_eq!(r.status, 0, "{id}: {r:?}");
    }

    // The surviving and the restarted worker finish everything.
    let rows = wait_all_ended(dir.path(), &home, Duration::from_secs(90)).unwrap_or_else(
        |(open, events)| {
            panic!(
                "seed {seed}: {} runs are still open: {open:#?}\nthe first's journal: {events}",
                open.len()
            )
        },
    );
    let mut worker_pids = killed_pids.clone();
    for (child, _) in &mut workers {
        // SAFETY: kill only sends a signal, to a child not yet waited for.
        let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(rc, 0);
    }
    for (mut child, err) in workers {
        let pid = child.id();
        reaper.forget(&child);
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

    // Every run that returned is there; every run there ended as its flow says.
    for id in &returned {
        assert!(rows.contains_key(id), "seed {seed}: run {id} is lost");
    }
    assert!(rows.len() <= started.len(), "seed {seed}: runs made up");
    let mut seen_n = BTreeSet::new();
    let log = fs::read_to_string(dir.path().join("calls.log")).unwrap_or_default();
    let mut invocations: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for line in log.lines() {
        let (_, key, ms) = log_line(line);
        invocations.entry(key.to_string()).or_default().push(ms);
    }
    let (mut repeated, mut takeovers) = (0, 0);
    let mut marked = 0;
    for (id, row) in &rows {
        let flow = row["flow"].as_str().unwrap();
        assert_eq!(row["holes"], 0, "{id}: {row}");
        let killed = !returned.contains(id);
        let r = reel_env(dir.path(), &["events", id, "--json"], &[home.env()]);
        assert_eq!(r.status, 0, "{r:?}");
        let events = json(&r);
        let events = events.as_array().unwrap();
        let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
        let ctx = format!("seed {seed}: {flow} {id} (its `reel run` killed: {killed}): {kinds:?}");
        for (i, ev) in events.iter().enumerate() {
            assert_eq!(ev["seq"], i, "{ctx}: a gap or a repeat");
        }
        assert_eq!(kinds.first(), Some(&"run_started"), "{ctx}");
        assert_eq!(kinds.last(), Some(&"run_finished"), "{ctx}");
        assert_eq!(
            kinds.iter().filter(|k| **k == "run_finished").count(),
            1,
            "{ctx}: ended twice"
        );
        // Held by one process at a time: a process takes the run up from a park, or from a
        // holder that was killed (the `reel run` that started it, or the last taker).
        let mut holder: Option<u32> = None;
        let mut once = BTreeSet::new();
        let mut recorded_at: BTreeMap<(String, String), i64> = BTreeMap::new();
        let mut step_done_at: BTreeMap<String, i64> = BTreeMap::new();
        let mut keys: BTreeMap<(String, String), String> = BTreeMap::new();
        let mut marks: BTreeSet<String> = BTreeSet::new();
        // When the resume that a call's recorded start follows was recorded.
        let mut resumed_at: Option<i64> = None;
        let mut started_after: BTreeMap<(String, String), i64> = BTreeMap::new();
        for (i, ev) in events.iter().enumerate() {
            let kind = kinds[i];
            let call = (ev["step"].to_string(), ev["index"].to_string());
            match kind {
                "run_resumed" => {
                    let by = ev["data"]["by"].as_str().unwrap();
                    let pid: u32 = by.rsplit(':').next().unwrap().parse().unwrap();
                    assert!(worker_pids.contains(&pid), "{ctx}: resumed by {by}");
                    if kinds[i - 1] != "run_waiting" {
                        takeovers += 1;
                        match holder {
                            Some(h) => {
                                assert!(killed_pids.contains(&h), "{ctx}: taken from {h}, alive")
                            }
                            None => assert!(killed, "{ctx}: taken from its live `reel run`"),
                        }
                    }
                    holder = Some(pid);
                    resumed_at = Some(at_ms(ev));
                }
                "run_waiting" | "step_skipped" => {}
                "unknown_outcome" => {
                    marks.insert(ev["data"]["key"].as_str().unwrap().to_string());
                }
                "step_started" => {
                    // A call in flight at a kill starts again, with its first key.
                    let key = ev["data"]["key"].as_str().unwrap().to_string();
                    if let Some(first) = keys.insert(call.clone(), key.clone()) {
                        assert_eq!(first, key, "{ctx}: {call:?} started with two keys");
                    }
                    if let Some(at) = resumed_at {
                        started_after.entry(call.clone()).or_insert(at);
                    }
                    let what = format!("{kind} {} {} {}", ev["step"], ev["index"], ev["attempt"]);
                    once.insert(what);
                }
                _ => {
                    let what = format!("{kind} {} {} {}", ev["step"], ev["index"], ev["attempt"]);
                    assert!(once.insert(what.clone()), "{ctx}: {what:?} is twice");
                }
            }
            if kind == "effect_recorded" {
                recorded_at.insert(call.clone(), at_ms(ev));
            }
            if kind == "step_succeeded" {
                step_done_at.insert(ev["step"].to_string(), at_ms(ev));
            }
        }
        // No call made after its result, nor its step's success, was recorded; a call made
        // twice is one of a run a kill touched.
        for ((step, index), key) in &keys {
            let times = invocations.get(key).cloned().unwrap_or_default();
            // In `fast` mode a worker killed after claiming the run and making the call,
            // before any of its rows committed, leaves no trace in the journal: the call was
            // made before the resume the journal records, by a process now dead.
            let unrecorded_taker = events[0]["data"]["durability"] == "fast"
                && !killed_pids.is_empty()
                && started_after
                    .get(&(step.clone(), index.clone()))
                    .is_some_and(|resumed| times.iter().any(|t| t <= resumed));
            let touched = killed
                || unrecorded_taker
                || events.iter().any(|e| {
                    e["kind"] == "run_resumed"
                        && e["data"]["by"].as_str().is_some_and(|b| {
                            killed_pids.contains(&b.rsplit(':').next().unwrap().parse().unwrap())
                        })
                });
            // No making may come after the call's result: a call in flight when its `reel` was
            // killed dies with it (its tool process gets SIGKILL when `reel` dies), so it cannot
            // make its effect late, after the run's new holder made it again.
            if let Some(done) = recorded_at.get(&(step.clone(), index.clone())) {
                assert!(
                    !times.is_empty(),
                    "{ctx}: {step} {index} recorded, never made"
                );
                let late = times.iter().filter(|t| *t > done).count();
                assert!(
                    late == 0,
                    "{ctx}: {step} {index} made at {times:?}, after its result ({done})"
                );
            }
            if let Some(done) = step_done_at.get(step) {
                let late = times.iter().filter(|t| *t > done).count();
                assert!(
                    late == 0,
                    "{ctx}: {step} made at {times:?}, after its success ({done})"
                );
            }
            if times.len() > 1 {
                repeated += times.len() - 1;
                // `durable` records a call's start before making it: a call made again was in
                // flight for the journal, and the resume says so.
                if events[0]["data"]["durability"] == "durable" {
                    assert!(
                        marks.contains(key),
                        "{ctx}: {step} {index} made again unmarked"
                    );
                }
                assert!(
                    touched,
                    "{ctx}: {step} {index} made {} times, no kill near it (made at {times:?}, \
                     its recorded start follows the resume at {:?})",
                    times.len(),
                    started_after.get(&(step.clone(), index.clone()))
                );
            }
        }
        marked += marks.len();
        match flow {
            "timer" => {
                assert_eq!(row["status"], "succeeded", "{ctx}");
                let out = json(&reel_env(
                    dir.path(),
                    &["resume", id, "--json"],
                    &[home.env()],
                ));
                let n = out["output"]["n"].as_i64().unwrap();
                assert_eq!(out["output"]["b"], json!([n, 2 * n]), "{ctx}");
                assert!(seen_n.insert(n), "{ctx}: n={n} twice");
            }
            "signaled" => {
                assert_eq!(row["status"], "succeeded", "{ctx}");
                let out = json(&reel_env(
                    dir.path(),
                    &["resume", id, "--json"],
                    &[home.env()],
                ));
                let n = out["output"]["n"].as_i64().unwrap();
                let v = if killed { 0 } else { n * 10 };
                assert_eq!(out["output"]["b"], json!(n + v), "{ctx}");
                assert!(seen_n.insert(n), "{ctx}: n={n} twice");
            }
            _ => assert_eq!(row["status"], "canceled", "{ctx}"),
        }
    }

    // Nothing a user sees speaks of a store error (a killed process's stderr included).
    let stderrs = stderrs.into_inner().unwrap();
    for (what, text) in &stderrs {
        let lower = text.to_lowercase();
        for bad in ["locked", "busy", "store.", "panicked"] {
            assert!(
                !lower.contains(bad),
                "seed {seed}: `reel {what}` said `{bad}`:\n{text}"
            );
        }
    }
    eprintln!(
        "seed {seed}: {} `reel run`s ({killed_runs} killed, {} runs created), workers killed after {kill_worker_at:?} of them; {takeovers} runs taken over from a killed process, {repeated} effects made again ({marked} marked unknown_outcome), {} processes, {:?}",
        started.len(),
        rows.len(),
        stderrs.len(),
        began.elapsed()
    );
}
