//! Crash at every point: for each named crash point of the runtime (`reel_store::crash`,
//! armed with `REEL_CRASH_AT=POINT:N` in a debug build), a run of one flow is stopped there at
//! its first, second and third passage, resumed to its end, and compared with an
//! uninterrupted run.
//!
//! Every effect of the flow appends `TAG KEY` to `calls.log` (`TAG` is the step, `step#i` in
//! its `foreach`; a failed attempt of `flaky` logs `flaky-failed`), so the test sees every
//! invocation. It checks: the same output; no step made again after its success was recorded;
//! no call made again after its result was recorded; a call made again only when the journal
//! had its start and not its result (in flight at the crash), with the key of that start, and
//! marked `unknown_outcome`. It prints a table: point × runs × outcomes.

// edge: the test drives real processes and waits for timers with the real clock.
#![allow(clippy::disallowed_methods)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

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
/// Each point is struck at its N-th passage for N in 1..=HITS.
const HITS: u64 = 3;

/// An effect, a `foreach` fan-out, a retried effect (its first attempt fails with exit 75), a
/// timer, and a last effect.
const FLOW: &str = r#"flow points {
  step a = exec {
    cmd: ["sh", "-c", "echo \"a $REEL_IDEMPOTENCY_KEY\" >> calls.log; echo 2"]
  }
  step fan = exec {
    foreach: [1, 2, 3]
    concurrency: 2
    cmd: ["sh", "-c", "echo \"fan#$1 $REEL_IDEMPOTENCY_KEY\" >> calls.log; echo $(( $2 * $3 ))", "sh", to_string(index), to_string(a.json), to_string(item)]
  }
  step flaky = exec {
    retry: { max: 3, base: 50ms, jitter: false }
    after: [fan]
    cmd: ["sh", "-c", "if [ ! -f \"failed.$REEL_IDEMPOTENCY_KEY\" ]; then touch \"failed.$REEL_IDEMPOTENCY_KEY\"; echo \"flaky-failed $REEL_IDEMPOTENCY_KEY\" >> calls.log; exit 75; fi; echo \"flaky $REEL_IDEMPOTENCY_KEY\" >> calls.log; echo 7"]
  }
  step nap = sleep {
    for: 100ms
    after: [flaky]
  }
  step b = exec {
    after: [nap]
    cmd: ["sh", "-c", "echo \"b $REEL_IDEMPOTENCY_KEY\" >> calls.log; echo $(( $1 + $2 ))", "sh", to_string(flaky.json), to_string(fan[2].json)]
  }
  output { fan: [for x in fan: x.json], b: b.json }
}
"#;

/// A call: its step and `foreach` index.
type CallId = (String, Option<u32>);

/// The effect invocations `calls.log` holds, in order (failed attempts of `flaky` left out:
/// a retry is not a repeat).
fn read_log(dir: &Path) -> Vec<(CallId, String)> {
    let text = fs::read_to_string(dir.join("calls.log")).unwrap_or_default();
    text.lines()
        .filter(|l| !l.starts_with("flaky-failed "))
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

fn read_journal(dir: &Path, home: &str, run: &str) -> Journal {
    let r = reel_env(dir, &["events", run, "--json"], &[("REEL_HOME", home)]);
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

/// How one point fared over its runs.
#[derive(Default)]
struct Tally {
    runs: usize,
    not_reached: usize,
    right_output: usize,
    resumes: usize,
    steps_rerun: usize,
    repeated: usize,
}

/// Runs the flow stopped at `point`'s `n`-th passage, then resumes it to its end; `None` when
/// the point was passed fewer than `n` times.
fn crashed(point: &str, mode: &str, n: u64, reference: &Value, tally: &mut Tally) -> Option<()> {
    let dir = temp();
    write(dir.path(), "flow.reel", FLOW);
    let home = dir.path().join(".reel");
    let home = home.to_str().unwrap();
    let crash = format!("{point}:{n}");
    let armed = [("REEL_HOME", home), ("REEL_CRASH_AT", crash.as_str())];
    let plain = [("REEL_HOME", home)];
    let ctx = format!("point {point}:{n}, {mode}");

    // The takeover point is passed when a process claims a run: a worker taking up the parked
    // run; every other point is passed by the first `reel run`.
    let args: &[&str] = if point == "takeover" {
        let r = reel_env(
            dir.path(),
            &["run", "flow.reel", "--durability", mode, "--json"],
            &plain,
        );
        assert_eq!(json(&r)["status"], "waiting", "{ctx}: {r:?}");
        std::thread::sleep(Duration::from_millis(150));
        &["worker", "--until-idle", "--poll-ms", "20"]
    } else {
        &["run", "flow.reel", "--durability", mode, "--json"]
    };
    let mut command = reel(dir.path(), args);
    for (k, v) in armed {
        command.env(k, v);
    }
    let out = command.output().unwrap();
    if out.status.code().is_some() {
        // It ended by itself: the point was passed fewer than n times.
        tally.not_reached += 1;
        return None;
    }
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        Some(libc::SIGABRT),
        "{ctx}"
    );
    tally.runs += 1;
    // Tools of the stopped process may still be writing their lines.
    std::thread::sleep(Duration::from_millis(300));
    let runs = json(&reel_env(dir.path(), &["runs", "--json"], &plain));
    let Some(run) = runs[0]["run"].as_str().map(str::to_string) else {
        // Stopped before the run was created: nothing may have run.
        assert!(
            read_log(dir.path()).is_empty(),
            "{ctx}: a call ran for no run"
        );
        tally.right_output += 1;
        return Some(());
    };

    // Resume until it ends (a parked run waits out its timer between resumes).
    let mut output = None;
    for _ in 0..40 {
        let before = read_journal(dir.path(), home, &run);
        let log_before = read_log(dir.path());
        let r = reel_env(dir.path(), &["resume", &run, "--json"], &plain);
        assert_eq!(r.status, 0, "{ctx}: {r:?}");
        tally.resumes += 1;
        let after = read_journal(dir.path(), home, &run);
        let log_after = read_log(dir.path());
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
                // In `fast` mode a call is made before its start is committed: a crash may
                // lose the start, and the call is then made again unmarked (with the same
                // key, checked below). `durable` waits for the start first.
                if mode == "fast" {
                    continue;
                }
                let started = before.started.get(call);
                assert!(
                    started.is_some_and(|k| k.contains(key)),
                    "{ctx}: {call:?} was repeated but its start was not recorded with key {key}: {started:?}"
                );
                assert_eq!(
                    after.repeated.get(call),
                    started,
                    "{ctx}: {call:?} was repeated without its unknown_outcome mark"
                );
            }
        }
        let out = json(&r);
        if out["status"] == "succeeded" {
            output = Some(out["output"].clone());
            break;
        }
        assert_eq!(out["status"], "waiting", "{ctx}: {out}");
        std::thread::sleep(Duration::from_millis(60));
    }
    let output = output.unwrap_or_else(|| panic!("{ctx}: the run never ended"));
    assert_eq!(&output, reference, "{ctx}: the output differs");
    tally.right_output += 1;

    // Every call made, each with one key: the one its start recorded.
    let mut keys: BTreeMap<CallId, BTreeSet<String>> = BTreeMap::new();
    for (c, k) in read_log(dir.path()) {
        keys.entry(c).or_default().insert(k);
    }
    let journal = read_journal(dir.path(), home, &run);
    assert_eq!(keys.len(), 6, "{ctx}: every call made: {keys:?}");
    for (call, ks) in keys {
        assert_eq!(
            Some(&ks),
            journal.started.get(&call),
            "{ctx}: {call:?}: keys"
        );
    }
    Some(())
}

#[cfg(unix)]
#[test]
fn every_crash_point_resumes_to_the_output_of_an_uninterrupted_run() {
    let dir = temp();
    write(dir.path(), "flow.reel", FLOW);
    let home = dir.path().join(".reel");
    let home = home.to_str().unwrap();
    let r = reel_env(
        dir.path(),
        &["run", "flow.reel", "--json"],
        &[("REEL_HOME", home)],
    );
    assert_eq!(json(&r)["status"], "waiting", "{r:?}");
    std::thread::sleep(Duration::from_millis(150));
    let run = json(&r)["run"].as_str().unwrap().to_string();
    let r = reel_env(
        dir.path(),
        &["resume", &run, "--json"],
        &[("REEL_HOME", home)],
    );
    let reference = json(&r);
    assert_eq!(reference["status"], "succeeded", "{reference}");
    let reference = reference["output"].clone();
    assert_eq!(reference["b"], 13, "{reference}");

    let mut table = Vec::new();
    for mode in ["durable", "fast"] {
        for point in POINTS {
            let mut tally = Tally::default();
            for n in 1..=HITS {
                crashed(point, mode, n, &reference, &mut tally);
            }
            assert!(tally.runs > 0, "{point}, {mode}: never reached");
            table.push((point, mode, tally));
        }
    }
    eprintln!(
        "| point | mode | crashed runs | not reached | resumes | right output | steps re-run after success | effects repeated (in flight, same key, marked) |"
    );
    eprintln!("|---|---|---|---|---|---|---|---|");
    for (point, mode, t) in &table {
        eprintln!(
            "| `{point}` | {mode} | {} | {} | {} | {} | {} | {} |",
            t.runs, t.not_reached, t.resumes, t.right_output, t.steps_rerun, t.repeated
        );
    }
}

#[test]
fn a_crash_point_that_does_not_exist_is_refused() {
    let dir = temp();
    write(dir.path(), "flow.reel", FLOW);
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
