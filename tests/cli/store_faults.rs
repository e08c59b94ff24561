//! A store that cannot write (issue 12, item 2): a full disk, a read-only file, a refused or
//! slow write, injected into the store's writer of a debug build with `REEL_STORE_FAULT`
//! (`WHAT@WHEN[*N]`, see `runtime/store/src/writer/faults.rs`) at a chosen moment: here the
//! batch that records step `b`'s result, after step `a`'s record has landed.
//!
//! The promises: `reel run --json` prints its object; the error names the cause; nothing
//! already recorded is lost and no row is written with an empty digest; the run is marked
//! failed when the store can still take that record, else it stays resumable; `reel resume`
//! continues once the store can be written, to the output an undisturbed run gives.

use std::path::Path;

use serde_json::Value;

use crate::support::*;

/// Two effect steps that take a moment each, so `a`'s records commit (the writer gathers a
/// batch for 2 ms) before `b`'s result comes. Every call appends its step's name to
/// `calls.log`.
const FLOW: &str = r#"flow f {
  step a = exec { cmd: ["sh", "-c", "echo a >> calls.log; sleep 0.2; echo 20"] }
  step b = exec { cmd: ["sh", "-c", "echo b >> calls.log; sleep 0.1; echo $(( $1 + 1 ))", "sh", a.stdout] }
  output b.json
}
"#;

/// `reel run --json` with the fault `fault`, in `mode`: its exit status and object.
fn run_with_fault(dir: &Path, mode: &str, fault: &str) -> (i32, Value, String) {
    let r = reel_env(
        dir,
        &["run", "f.reel", "--durability", mode, "--json"],
        &[("REEL_STORE_FAULT", fault)],
    );
    let object = serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("`reel run --json` prints its object ({e}): {r:?}"));
    (r.status, object, r.stderr)
}

/// The run's journal, as `reel events --json` gives it.
fn journal(dir: &Path, run: &str) -> Vec<Value> {
    let r = reel_in(dir, &["events", run, "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    json(&r).as_array().expect("events").clone()
}

/// No recorded event names a value by an empty name (the rows issue 12 found after a full
/// disk: `step_started {"inputs": ""}`), and the journal has no gap.
fn assert_sound(events: &[Value]) {
    for (n, e) in events.iter().enumerate() {
        assert_eq!(e["seq"], n as u64, "a gapless journal: {events:?}");
        for field in ["inputs", "output", "result", "payload", "flow", "env"] {
            if let Some(d) = e["data"].get(field).and_then(Value::as_str) {
                // A digest, or a short value named by itself.
                let named = match reel_flowspec::canonical::literal(d) {
                    Some(text) => serde_json::from_str::<Value>(text).is_ok(),
                    None => d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit()),
                };
                assert!(named, "{field} of {e}");
            }
        }
    }
}

fn kinds_of(events: &[Value], step: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["step"] == step)
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect()
}

/// Resumes `run` without the fault (space is back): it ends as an undisturbed run does.
fn resumes_to_the_end(dir: &Path, run: &str) {
    let r = reel_in(dir, &["resume", run, "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    let out = json(&r);
    assert_eq!(out["status"], "succeeded", "{out}");
    assert_eq!(out["output"], 21);
    let events = journal(dir, run);
    assert_sound(&events);
    // `a`'s record survived the fault: it did not run again.
    assert_eq!(calls(dir).iter().filter(|c| *c == "a").count(), 1);
}

#[test]
fn a_disk_that_stays_full_leaves_the_run_resumable_with_nothing_lost() {
    for mode in ["fast", "durable"] {
        let dir = temp();
        write(dir.path(), "f.reel", FLOW);
        let (status, out, stderr) = run_with_fault(dir.path(), mode, "full@effect_recorded:b");
        assert_eq!(status, 1, "{mode}: {out} {stderr}");
        assert_eq!(out["status"], "running", "{mode}: {out}");
        assert_eq!(out["output"], Value::Null);
        assert_eq!(out["error"]["code"], "store.disk-full", "{mode}: {out}");
        let message = out["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("the store's disk is full: database or disk is full"),
            "{message}"
        );
        assert!(stderr.contains("nothing recorded is lost"), "{stderr}");
        let run = out["run"].as_str().unwrap().to_string();
        let events = journal(dir.path(), &run);
        assert_sound(&events);
        assert!(
            kinds_of(&events, "a").contains(&"step_succeeded".to_string()),
            "{mode}: what was recorded before the fault stays: {events:?}"
        );
        assert!(
            !kinds_of(&events, "b").contains(&"effect_recorded".to_string()),
            "{mode}: {events:?}"
        );
        let runs = json(&reel_in(dir.path(), &["runs", "--json"]));
        assert_eq!(runs[0]["status"], "running", "{mode}: {runs}");
        resumes_to_the_end(dir.path(), &run);
    }
}

#[test]
fn a_store_that_can_take_the_ending_marks_the_run_failed_and_a_redrive_finishes_it() {
    let dir = temp();
    write(dir.path(), "f.reel", FLOW);
    // The disk is full for one batch, then has room again.
    let (status, out, stderr) = run_with_fault(dir.path(), "fast", "full@effect_recorded:b*1");
    assert_eq!(status, 1, "{out} {stderr}");
    assert_eq!(out["status"], "failed", "{out}");
    assert_eq!(out["error"]["code"], "store.disk-full", "{out}");
    let run = out["run"].as_str().unwrap().to_string();
    let events = journal(dir.path(), &run);
    assert_sound(&events);
    let last = events.last().unwrap();
    assert_eq!(last["kind"], "run_finished");
    assert_eq!(last["data"]["status"], "failed");
    assert_eq!(last["data"]["error"]["code"], "store.disk-full");
    let runs = json(&reel_in(dir.path(), &["runs", "--json"]));
    assert_eq!(runs[0]["status"], "failed", "{runs}");
    resumes_to_the_end(dir.path(), &run);
}

#[test]
fn a_read_only_store_and_a_refused_write_are_named_and_resumable() {
    for (fault, code, says) in [
        (
            "readonly@effect_recorded:b",
            "store.unwritable",
            "the store's files cannot be written: attempt to write a readonly database",
        ),
        (
            "refuse@effect_recorded:b",
            "store.poisoned",
            "the write was refused",
        ),
    ] {
        let dir = temp();
        write(dir.path(), "f.reel", FLOW);
        let (status, out, stderr) = run_with_fault(dir.path(), "fast", fault);
        assert_eq!(status, 1, "{fault}: {out} {stderr}");
        assert_eq!(out["error"]["code"], code, "{fault}: {out}");
        let message = out["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{fault}: {message}");
        let run = out["run"].as_str().unwrap().to_string();
        assert_sound(&journal(dir.path(), &run));
        resumes_to_the_end(dir.path(), &run);
    }
}

#[test]
fn a_slow_write_only_slows_the_run() {
    let dir = temp();
    write(dir.path(), "f.reel", FLOW);
    let (status, out, stderr) = run_with_fault(dir.path(), "fast", "delay=300@effect_recorded:b");
    assert_eq!(status, 0, "{out} {stderr}");
    assert_eq!(out["status"], "succeeded");
    assert_eq!(out["output"], 21);
    assert_eq!(calls(dir.path()), vec!["a", "b"]);
}
