//! Crash at every point, many times, across flows: each named crash point of the runtime
//! (`reel_store::crash`, armed with `REEL_CRASH_AT=POINT:N` in a debug build) is struck at
//! every passage up to a bound, in every process of a drive that passes it, across flows that
//! cover it (sequential effects, a `foreach` fan-out, retries with backoff, timer parks, a
//! signal wait, a worker taking a parked run up). The run is then driven to its end and its
//! output compared with the output an uninterrupted drive gives.
//!
//! A *drive* is the processes that bring a run to its end: `reel run`, then, while the run
//! waits, a signal (when the flow waits for one) and `reel worker --until-idle` (a worker
//! takes the parked run up), and after a crash `reel resume`, a worker (which finds the
//! holder dead) or two workers racing for the run, as a seed says. A *strike* stops the
//! `s`-th process of the drive at the `n`-th passage of a point. The processes that repair the
//! crash may themselves be stopped again, at a point and passage drawn from the seed
//! (`REEL_CRASH_SEED=N` repeats one; it is printed): a crash during a resume.
//!
//! Every effect appends `TAG KEY` to `calls.log` (`TAG` is the step, `step#i` in its
//! `foreach`; a failed attempt logs `TAG-failed`), so the test sees every invocation. It
//! checks, per process: no step made again after its success was recorded; no call made again
//! after its result was recorded; a call made again only when the journal had its start and
//! not its result (in flight at the crash), with the key of that start; at the end, the right
//! output, every call made with one key (its `step_started`'s) and, in `durable` mode, every
//! repeated call marked `unknown_outcome` with that key. It prints a table per point.
//!
//! The bounded form (this test in CI) strikes passages 1..=3 of each process in one write
//! mode (alternating); `REEL_CRASH_HITS=N` raises the bound and `REEL_CRASH_MODES=both` strikes
//! each passage in both modes (`scripts/crash-points.sh` runs that long form for the figures).

// edge: the test drives real processes, waits for timers with the real clock and draws the
// seed of its second crashes at random (printed, and read back from REEL_CRASH_SEED).
#![allow(clippy::disallowed_methods)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use crate::support::*;

/// The crash points, as `REEL_CRASH_AT` names them (one list: `reel_store::crash::CrashPoint`).
const POINTS: [&str; 7] = [
    "before-commit",
    "after-commit",
    "effect-returned",
    "fan-out",
    "backoff",
    "park",
    "takeover",
];

/// A flow the harness drives, with what an uninterrupted drive gives.
struct Scenario {
    /// Its name in the tables.
    name: &'static str,
    /// The source.
    flow: &'static str,
    /// The distinct effect calls a drive makes.
    calls: usize,
    /// The payload of the signal `go` it waits for, if it waits for one.
    signal: Option<Value>,
    /// The output.
    output: fn() -> Value,
}

/// Four effects in a row, each using the one before.
const SEQ: &str = r#"flow seq {
  step a = exec {
    cmd: ["sh", "-c", "echo \"a $REEL_IDEMPOTENCY_KEY\" >> calls.log; echo 1"]
  }
  step b = exec {
    cmd: ["sh", "-c", "echo \"b $REEL_IDEMPOTENCY_KEY\" >> calls.log; echo $(( $1 + 1 ))", "sh", to_string(a.json)]
  }
  step c = exec {
    cmd: ["sh", "-c", "echo \"c $REEL_IDEMPOTENCY_KEY\" >> calls.log; echo $(( $1 * 10 ))", "sh", to_string(b.json)]
  }
  step d = exec {
    cmd: ["sh", "-c", "echo \"d $REEL_IDEMPOTENCY_KEY\" >> calls.log; echo $(( $1 + 3 ))", "sh", to_string(c.json)]
  }
  output [a.json, b.json, c.json, d.json]
}
"#;

/// Two `foreach` fan-outs, the second over the first's results, then an effect summing them.
const FAN: &str = r#"flow fan {
  step one = exec {
    foreach: [1, 2, 3, 4]
    concurrency: 3
    cmd: ["sh", "-c", "echo \"one#$1 $REEL_IDEMPOTENCY_KEY\" >> calls.log; echo $(( $2 * 2 ))", "sh", to_string(index), to_string(item)]
  }
  step two = exec {
    foreach: [for x in one: x.json]
    concurrency: 4
    cmd: ["sh", "-c", "echo \"two#$1 $REEL_IDEMPOTENCY_KEY\" >> calls.log; echo $(( $2 + 1 ))", "sh", to_string(index), to_string(item)]
  }
  step sum = exec {
    cmd: ["sh", "-c", "echo \"sum $REEL_IDEMPOTENCY_KEY\" >> calls.log; echo $(( $1 + $2 + $3 + $4 ))", "sh", to_string(two[0].json), to_string(two[1].json), to_string(two[2].json), to_string(two[3].json)]
  }
  output { two: [for x in two: x.json], sum: sum.json }
}
"#;

/// Two effects that fail with exit 75 (retryable) before they succeed: three backoffs.
const RETRY: &str = r#"flow retry {
  step flaky = exec {
    retry: { max: 4, base: 20ms, jitter: false }
    cmd: ["sh", "-c", "n=$(cat \"tries.$REEL_IDEMPOTENCY_KEY\" 2>/dev/null || echo 0); if [ \"$n\" -lt 2 ]; then echo $((n + 1)) > \"tries.$REEL_IDEMPOTENCY_KEY\"; echo \"flaky-failed $REEL_IDEMPOTENCY_KEY\" >> calls.log; exit 75; fi; echo \"flaky $REEL_IDEMPOTENCY_KEY\" >> calls.log; echo 7"]
  }
  step again = exec {
    retry: { max: 3, base: 20ms, jitter: false }
    cmd: ["sh", "-c", "if [ ! -f \"failed.$REEL_IDEMPOTENCY_KEY\" ]; then touch \"failed.$REEL_IDEMPOTENCY_KEY\"; echo \"again-failed $REEL_IDEMPOTENCY_KEY\" >> calls.log; exit 75; fi; echo \"again $REEL_IDEMPOTENCY_KEY\" >> calls.log; echo $(( $1 * 3 ))", "sh", to_string(flaky.json)]
  }
  output again.json
}
"#;

/// Three timers, each parking the run; a worker takes it up each time.
const TIMER: &str = r#"flow timer {
  step a = exec {
    cmd: ["sh", "-c", "echo \"a $REEL_IDEMPOTENCY_KEY\" >> calls.log; echo 5"]
  }
  step nap = sleep {
    for: 60ms
    after: [a]
  }
  step b = exec {
    after: [nap]
    cmd: ["sh", "-c", "echo \"b $REEL_IDEMPOTENCY_KEY\" >> calls.log; echo $(( $1 + 1 ))", "sh", to_string(a.json)]
  }
  step nap2 = sleep {
    for: 60ms
    after: [b]
  }
  step c = exec {
    after: [nap2]
    cmd: ["sh", "-c", "echo \"c $REEL_IDEMPOTENCY_KEY\" >> calls.log; echo $(( $1 * 2 ))", "sh", to_string(b.json)]
  }
  step nap3 = sleep {
    for: 60ms
    after: [c]
  }
  step d = exec {
    after: [nap3]
    cmd: ["sh", "-c", "echo \"d $REEL_IDEMPOTENCY_KEY\" >> calls.log; echo $(( $1 + 1 ))", "sh", to_string(c.json)]
  }
  output [a.json, b.json, c.json, d.json]
}
"#;

/// A wait for a signal (the test sends it while the run is parked), then effects of its payload.
const SIGNAL: &str = r#"flow signaled {
  step a = exec {
    cmd: ["sh", "-c", "echo \"a $REEL_IDEMPOTENCY_KEY\" >> calls.log; echo 4"]
  }
  step go = signal {
    name: "go"
    timeout: 1d
    after: [a]
  }
  step b = exec {
    foreach: [1, 2]
    cmd: ["sh", "-c", "echo \"b#$1 $REEL_IDEMPOTENCY_KEY\" >> calls.log; echo $(( $2 * $3 + $4 ))", "sh", to_string(index), to_string(item), to_string(go.v), to_string(a.json)]
  }
  output [for x in b: x.json]
}
"#;

/// Every flow, by name.
fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "seq",
            flow: SEQ,
            calls: 4,
            signal: None,
            output: || json!([1, 2, 20, 23]),
        },
        Scenario {
            name: "fan",
            flow: FAN,
            calls: 9,
            signal: None,
            output: || json!({"two": [3, 5, 7, 9], "sum": 24}),
        },
        Scenario {
            name: "retry",
            flow: RETRY,
            calls: 2,
            signal: None,
            output: || json!(21),
        },
        Scenario {
            name: "timer",
            flow: TIMER,
            calls: 4,
            signal: None,
            output: || json!([5, 6, 12, 13]),
        },
        Scenario {
            name: "signal",
            flow: SIGNAL,
            calls: 3,
            signal: Some(json!({"v": 10})),
            output: || json!([14, 24]),
        },
    ]
}

/// The flows that pass `point`, as far as the harness strikes it.
fn covering(point: &str) -> Vec<Scenario> {
    let names: &[&str] = match point {
        "before-commit" | "after-commit" => &["seq", "fan", "retry", "timer", "signal"],
        "effect-returned" => &["seq", "fan", "retry", "signal"],
        "fan-out" => &["fan", "signal"],
        "backoff" => &["retry"],
        "park" | "takeover" => &["timer", "signal"],
        _ => panic!("no such point {point}"),
    };
    scenarios()
        .into_iter()
        .filter(|s| names.contains(&s.name))
        .collect()
}

/// A call: its step and `foreach` index.
type CallId = (String, Option<u32>);

/// The effect invocations `calls.log` holds, in order (failed attempts left out: a retry is
/// not a repeat).
fn read_log(dir: &Path) -> Vec<(CallId, String)> {
    let text = fs::read_to_string(dir.join("calls.log")).unwrap_or_default();
    text.lines()
        .filter(|l| !l.split(' ').next().unwrap_or("").ends_with("-failed"))
        .map(|line| {
            let (tag, key) = line.split_once(' ').expect("`TAG KEY`");
            let call = match tag.split_once('#') {
                Some((s, i)) => (s.to_string(), Some(i.parse().unwrap())),
                None => (tag.to_string(), None),
            };
            (call, key.to_string())
        })
        .collect()
}

/// What a journal says, as far as the checks need.
#[derive(Default, Debug)]
struct Journal {
    succeeded: BTreeSet<String>,
    done: BTreeSet<CallId>,
    started: BTreeMap<CallId, BTreeSet<String>>,
    repeated: BTreeMap<CallId, BTreeSet<String>>,
}

fn read_journal(dir: &Path, home: &Home, run: &str) -> Journal {
    let r = reel_env(dir, &["events", run, "--json"], &[home.env()]);
    assert_eq!(r.status, 0, "{r:?}");
    let mut j = Journal::default();
    for e in json(&r).as_array().unwrap() {
        let step = e["step"].as_str().map(str::to_string);
        let call = || (step.clone().unwrap(), e["index"].as_u64().map(|i| i as u32));
        let key = || e["data"]["key"].as_str().unwrap_or("-").to_string();
        match e["kind"].as_str().unwrap() {
            "step_succeeded" => {
                j.succeeded.insert(step.clone().unwrap());
            }
            "effect_recorded" | "call_succeeded" => {
                j.done.insert(call());
            }
            "step_started" => {
                j.started.entry(call()).or_default().insert(key());
            }
            "unknown_outcome" => {
                j.repeated.entry(call()).or_default().insert(key());
            }
            _ => {}
        }
    }
    j
}

/// How one point fared over its strikes.
#[derive(Default)]
struct Tally {
    /// Strikes that stopped a process.
    runs: usize,
    /// Strikes at a passage the process did not reach (it ended by itself).
    not_reached: usize,
    /// Processes started to bring crashed runs to their end.
    resumes: usize,
    /// Second crashes, during the repair (drawn from the seed).
    second_crashes: usize,
    /// Crashed runs that ended with the output of an uninterrupted drive.
    right_output: usize,
    /// Steps made again after their success was recorded (must stay 0: a violation fails).
    steps_rerun: usize,
    /// Effect invocations made again (each in flight at a crash, with its first key).
    repeated: usize,
}

/// One process of a drive: what it is.
enum Stage<'a> {
    /// `reel run` of the flow.
    Run,
    /// `reel worker --until-idle`: takes the parked run up, and on until it ends.
    Worker,
    /// `reel resume RUN`.
    Resume(&'a str),
    /// Two workers at once, racing to take the run over (a second crash, if any, is armed in
    /// the first).
    TwoWorkers,
}

/// Where a strike lands: the `stage`-th process of the drive (from 1), the `hit`-th passage.
#[derive(Clone, Copy, Debug)]
struct Strike {
    stage: usize,
    hit: u64,
}

/// Runs one stage with `crash` armed (if any); true when it was stopped by the crash point.
fn stage(dir: &Path, home: &Home, mode: &str, which: Stage, crash: Option<&str>) -> bool {
    let worker = vec!["worker", "--until-idle", "--poll-ms", "20"];
    let (args, racing) = match which {
        Stage::Run => (
            vec!["run", "flow.reel", "--durability", mode, "--json"],
            false,
        ),
        Stage::Worker => (worker, false),
        Stage::Resume(run) => (vec!["resume", run, "--json"], false),
        Stage::TwoWorkers => (worker, true),
    };
    let other = racing.then(|| {
        let mut command = reel(dir, &args);
        command
            .env(home.var, &home.value)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        command.spawn().unwrap()
    });
    let mut command = reel(dir, &args);
    command.env(home.var, &home.value);
    if let Some(crash) = crash {
        command.env("REEL_CRASH_AT", crash);
    }
    let out = command.output().unwrap();
    if let Some(other) = other {
        let o = other.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "the racing worker failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    if out.status.code().is_some() {
        assert!(
            out.status.success(),
            "reel {args:?} ({crash:?}) failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        return false;
    }
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        Some(libc::SIGABRT),
        "reel {args:?} ({crash:?}): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Tools of the stopped process may still be writing their lines.
    std::thread::sleep(Duration::from_millis(150));
    true
}

/// The store's one run and its status, once it exists.
fn the_run(dir: &Path, home: &Home) -> Option<(String, String)> {
    let r = reel_env(dir, &["runs", "--json"], &[home.env()]);
    assert_eq!(r.status, 0, "{r:?}");
    let runs = json(&r);
    let row = runs.as_array().unwrap().first()?;
    Some((
        row["run"].as_str().unwrap().to_string(),
        row["status"].as_str().unwrap().to_string(),
    ))
}

/// Drives `s` to its end with `strike` (if any) stopping one process, and second crashes drawn
/// from `rng` stopping some of the processes that repair it; checks every process. `None` when
/// the strike's passage was not reached.
fn drive(
    s: &Scenario,
    store: Store,
    mode: &str,
    point: &str,
    strike: Option<Strike>,
    rng: &mut StdRng,
    tally: &mut Tally,
) -> Option<()> {
    let dir = temp();
    let dir = dir.path();
    write(dir, "flow.reel", s.flow);
    let home = Home::new(store, dir);
    let home = &home;
    let ctx = format!("{}, {point} {strike:?}, {mode}, {store:?}", s.name);
    let mut crashed = false;
    let mut signaled = false;
    let mut second_crashes = 0;
    let mut repeated: Vec<(CallId, String)> = Vec::new();
    let mut n = 0;
    let output = loop {
        n += 1;
        assert!(n <= 40, "{ctx}: the run never ended");
        let current = the_run(dir, home);
        let (run, status) = match &current {
            Some((run, status)) => (Some(run.as_str()), status.as_str()),
            None => (None, ""),
        };
        if status == "succeeded" {
            let r = reel_env(dir, &["resume", run.unwrap(), "--json"], &[home.env()]);
            break json(&r)["output"].clone();
        }
        assert!(
            matches!(status, "" | "running" | "waiting"),
            "{ctx}: the run ended {status}"
        );
        if let (Some(run), Some(payload), false) = (run, &s.signal, signaled) {
            let r = reel_env(
                dir,
                &["signal", run, "go", &payload.to_string()],
                &[home.env()],
            );
            assert_eq!(r.status, 0, "{ctx}: {r:?}");
            signaled = true;
        }
        let which = match run {
            None if n == 1 => Stage::Run,
            // Stopped before the run was created: nothing may have run; start it again.
            None => {
                assert!(read_log(dir).is_empty(), "{ctx}: a call ran for no run");
                Stage::Run
            }
            Some(_) if status == "waiting" => Stage::Worker,
            // A run a crashed process held: `reel resume` takes it over, or a worker does
            // (it finds the holder dead), or two race for it, as the seed says.
            Some(run) => match rng.random_range(0..3) {
                0 => Stage::Resume(run),
                1 => Stage::Worker,
                _ => Stage::TwoWorkers,
            },
        };
        let crash = match strike {
            Some(st) if st.stage == n => Some(format!("{point}:{}", st.hit)),
            // A second crash, while the first is repaired, now and then.
            _ if crashed && second_crashes < 2 && rng.random_ratio(1, 4) => {
                let p = POINTS[rng.random_range(0..POINTS.len())];
                Some(format!("{p}:{}", rng.random_range(1..=3)))
            }
            _ => None,
        };
        let before = run.map(|r| read_journal(dir, home, r));
        let log_before = read_log(dir);
        let stopped = stage(dir, home, mode, which, crash.as_deref());
        if strike.is_some_and(|st| st.stage == n) {
            if !stopped {
                // The process passed the point fewer times than the strike asks.
                tally.not_reached += 1;
                return None;
            }
            tally.runs += 1;
            crashed = true;
        } else if stopped {
            second_crashes += 1;
            tally.second_crashes += 1;
        }
        if crashed && !(stopped && strike.is_some_and(|st| st.stage == n)) {
            tally.resumes += 1;
        }
        // What this process did against what the journal held before it.
        let log_after = read_log(dir);
        let Some(before) = before else {
            continue;
        };
        let ran_before: BTreeSet<&CallId> = log_before.iter().map(|(c, _)| c).collect();
        for (call, key) in &log_after[log_before.len()..] {
            if before.succeeded.contains(&call.0) {
                tally.steps_rerun += 1;
            }
            assert!(
                !before.succeeded.contains(&call.0),
                "{ctx}: step `{}` ran again after its success was recorded",
                call.0
            );
            assert!(
                !before.done.contains(call),
                "{ctx}: {call:?} ran again after its result was recorded"
            );
            if ran_before.contains(call) {
                tally.repeated += 1;
                repeated.push((call.clone(), key.clone()));
                // In `fast` mode a call is made before its start is committed: a crash may
                // lose the start, and the call is then made again unmarked (with the same
                // key, checked below). `durable` waits for the start first.
                if mode == "durable" {
                    let started = before.started.get(call);
                    assert!(
                        started.is_some_and(|k| k.contains(key)),
                        "{ctx}: {call:?} was repeated but its start was not recorded with key {key}: {started:?}"
                    );
                }
            }
        }
    };
    assert_eq!(output, (s.output)(), "{ctx}: the output differs");
    if crashed {
        tally.right_output += 1;
    }

    // Every call made, each with one key: the one its start recorded; every repeat marked.
    let mut keys: BTreeMap<CallId, BTreeSet<String>> = BTreeMap::new();
    for (c, k) in read_log(dir) {
        keys.entry(c).or_default().insert(k);
    }
    let (run, _) = the_run(dir, home).unwrap();
    let journal = read_journal(dir, home, &run);
    assert_eq!(keys.len(), s.calls, "{ctx}: every call made: {keys:?}");
    for (call, ks) in keys {
        assert_eq!(
            Some(&ks),
            journal.started.get(&call),
            "{ctx}: {call:?}: keys"
        );
    }
    if mode == "durable" {
        for (call, key) in repeated {
            assert!(
                journal
                    .repeated
                    .get(&call)
                    .is_some_and(|k| k.contains(&key)),
                "{ctx}: {call:?} was repeated without its unknown_outcome mark"
            );
        }
    }
    Some(())
}

/// How many processes an uninterrupted drive of `s` takes.
fn stages(s: &Scenario) -> usize {
    match s.name {
        // `reel run` parks; one worker takes the run up (three times for `timer`) to its end.
        "timer" | "signal" => 2,
        _ => 1,
    }
}

/// The bound on passages struck per process (`REEL_CRASH_HITS`, 3 by default).
fn hits() -> u64 {
    std::env::var("REEL_CRASH_HITS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3)
}

/// Strikes `point` at every passage up to the bound of every process of every drive that
/// passes it, and prints the point's row of the table.
fn strike_point(point: &str, store: Store) {
    let seed: u64 = std::env::var("REEL_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("{point} on {store:?}: seed {seed} (REEL_CRASH_SEED={seed} repeats it)");
    let mut rng = StdRng::seed_from_u64(seed);
    let both = std::env::var("REEL_CRASH_MODES").is_ok_and(|m| m == "both");
    let mut tallies: BTreeMap<&str, Tally> = BTreeMap::new();
    // Without `both`, the modes alternate from passage to passage, and from one process to
    // the next for its first passage (most processes pass `park` and `takeover` once).
    let mut group: u64 = 0;
    for s in covering(point) {
        for stage in 1..=stages(&s) {
            group += 1;
            for hit in 1..=hits() {
                let modes: &[&str] = if both {
                    &["durable", "fast"]
                } else if (group + hit).is_multiple_of(2) {
                    &["durable"]
                } else {
                    &["fast"]
                };
                let mut reached = false;
                for mode in modes {
                    let tally = tallies.entry(mode).or_default();
                    let strike = Some(Strike { stage, hit });
                    reached |= drive(&s, store, mode, point, strike, &mut rng, tally).is_some();
                }
                if !reached {
                    break;
                }
            }
        }
    }
    let runs: usize = tallies.values().map(|t| t.runs).sum();
    assert!(runs > 0, "{point}: never reached");
    for (mode, t) in &tallies {
        eprintln!(
            "| `{point}` | {store:?} | {mode} | {} | {} | {} | {} | {} | {} | {} |",
            t.runs,
            t.not_reached,
            t.resumes,
            t.second_crashes,
            t.right_output,
            t.steps_rerun,
            t.repeated
        );
    }
}

/// Every flow driven to its end without a crash, in both modes, on `store`.
fn uninterrupted(store: Store) {
    let mut rng = StdRng::seed_from_u64(0);
    for s in scenarios() {
        for mode in ["durable", "fast"] {
            let mut tally = Tally::default();
            drive(&s, store, mode, "none", None, &mut rng, &mut tally);
            assert_eq!(tally.resumes + tally.repeated + tally.runs, 0, "{}", s.name);
        }
    }
}

#[cfg(unix)]
#[test]
fn uninterrupted_drives_give_the_outputs_the_strikes_are_compared_with() {
    uninterrupted(Store::Sqlite);
}

#[cfg(unix)]
#[test]
fn uninterrupted_drives_on_postgres_give_the_same_outputs() {
    uninterrupted(Store::Postgres);
}

#[cfg(unix)]
#[test]
fn crash_before_commit() {
    strike_point("before-commit", Store::Sqlite);
}

#[cfg(unix)]
#[test]
fn crash_before_commit_on_postgres() {
    strike_point("before-commit", Store::Postgres);
}

#[cfg(unix)]
#[test]
fn crash_after_commit() {
    strike_point("after-commit", Store::Sqlite);
}

#[cfg(unix)]
#[test]
fn crash_after_commit_on_postgres() {
    strike_point("after-commit", Store::Postgres);
}

#[cfg(unix)]
#[test]
fn crash_between_an_effect_and_its_record() {
    strike_point("effect-returned", Store::Sqlite);
}

#[cfg(unix)]
#[test]
fn crash_between_an_effect_and_its_record_on_postgres() {
    strike_point("effect-returned", Store::Postgres);
}

#[cfg(unix)]
#[test]
fn crash_during_a_fan_out() {
    strike_point("fan-out", Store::Sqlite);
}

#[cfg(unix)]
#[test]
fn crash_during_a_fan_out_on_postgres() {
    strike_point("fan-out", Store::Postgres);
}

#[cfg(unix)]
#[test]
fn crash_in_a_retrys_backoff() {
    strike_point("backoff", Store::Sqlite);
}

#[cfg(unix)]
#[test]
fn crash_in_a_retrys_backoff_on_postgres() {
    strike_point("backoff", Store::Postgres);
}

#[cfg(unix)]
#[test]
fn crash_parking_on_a_timer_or_signal() {
    strike_point("park", Store::Sqlite);
}

#[cfg(unix)]
#[test]
fn crash_parking_on_a_timer_or_signal_on_postgres() {
    strike_point("park", Store::Postgres);
}

#[cfg(unix)]
#[test]
fn crash_as_a_worker_takes_a_run_over() {
    strike_point("takeover", Store::Sqlite);
}

#[cfg(unix)]
#[test]
fn crash_as_a_worker_takes_a_run_over_on_postgres() {
    strike_point("takeover", Store::Postgres);
}

#[test]
fn a_crash_point_that_does_not_exist_is_refused() {
    let dir = temp();
    write(dir.path(), "flow.reel", SEQ);
    let home = dir.path().join(".reel");
    let r = reel_env(
        dir.path(),
        &["run", "flow.reel"],
        &[
            ("REEL_HOME", home.to_str().unwrap()),
            ("REEL_CRASH_AT", "nowhere"),
        ],
    );
    assert_eq!(r.status, 2, "{r:?}");
    assert!(
        r.stderr.contains("REEL_CRASH_AT") && r.stderr.contains("before-commit"),
        "{r:?}"
    );
}
