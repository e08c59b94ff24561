//! Calls whose outcome is unknown (issue 12, item 11): `reel run` is killed between an effect's
//! start and its record, and resumed. The tool kills the `reel` that called it (`kill -9
//! $PPID`) the first time, in `durable` mode (its start is synced before it runs), so the kill
//! lands at exactly that point every time. Every invocation appends its idempotency key to
//! `calls.log`, so the test sees each one.

use std::path::Path;

use serde_json::Value;

use crate::support::*;

/// A flow calling `pay` (declared with `repeat`, if given), then reading its result.
fn flow(repeat: Option<&str>) -> String {
    let repeat = repeat
        .map(|r| format!("  repeat: \"{r}\"\n"))
        .unwrap_or_default();
    format!(
        "tool pay {{\n  kind: \"effect\"\n  exec: [\"sh\", \"pay.sh\"]\n{repeat}  input {{ amount: int }}\n  output {{ paid: int }}\n}}\n\nflow shop {{\n  step pay = pay {{ amount: 5 }}\n  step total = pay.paid + 1\n  output total\n}}\n"
    )
}

/// A run of the flow killed by its tool between the effect's start and its record: its id.
fn killed_run(dir: &Path, repeat: Option<&str>) -> String {
    write(dir, "flow.reel", &flow(repeat));
    write(dir, "pay.sh", KILLING_PAY_SH);
    let out = reel(
        dir,
        &["run", "flow.reel", "--durability", "durable", "--json"],
    )
    .output()
    .expect("reel starts");
    assert_eq!(out.status.code(), None, "reel was killed: {out:?}");
    assert!(
        out.stdout.is_empty(),
        "a killed run prints nothing: {out:?}"
    );
    let runs = json(&reel_in(dir, &["runs", "--json"]));
    assert_eq!(runs[0]["status"], "running", "{runs}");
    runs[0]["run"].as_str().expect("a run id").to_string()
}

/// The journal's events of kind `kind`, with their data.
fn events(dir: &Path, run: &str, kind: &str) -> Vec<Value> {
    let all = json(&reel_in(dir, &["events", run, "--json"]));
    all.as_array()
        .expect("an array of events")
        .iter()
        .filter(|e| e["kind"] == kind)
        .cloned()
        .collect()
}

#[test]
fn an_effect_killed_before_its_record_is_repeated_with_its_key_and_the_journal_says_so() {
    let dir = temp();
    let run = killed_run(dir.path(), None);
    let started = events(dir.path(), &run, "step_started");
    assert_eq!(started.len(), 1, "{started:?}");
    let key = started[0]["data"]["key"].as_str().unwrap().to_string();
    assert_eq!(calls(dir.path()), vec![key.clone()]);

    let r = reel_in(dir.path(), &["resume", &run, "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    let out = json(&r);
    assert_eq!(out["status"], "succeeded", "{out}");
    assert_eq!(out["output"], 6);

    // Made again, with the key of its first start, and marked so before it was.
    assert_eq!(calls(dir.path()), vec![key.clone(), key.clone()]);
    let unknown = events(dir.path(), &run, "unknown_outcome");
    assert_eq!(unknown.len(), 1, "{unknown:?}");
    assert_eq!(unknown[0]["step"], "pay");
    assert_eq!(unknown[0]["attempt"], 1);
    assert_eq!(unknown[0]["data"]["key"], key.as_str());
    assert_eq!(unknown[0]["data"]["then"], "repeated");
    let started = events(dir.path(), &run, "step_started");
    let pay: Vec<&Value> = started.iter().filter(|e| e["step"] == "pay").collect();
    assert_eq!(pay.len(), 2);
    assert!(pay[1]["seq"].as_u64() > unknown[0]["seq"].as_u64());
    assert_eq!(pay[1]["data"]["key"], key.as_str());

    // `reel events` shows it in its text; `reel runs` marks the run.
    let text = reel_in(dir.path(), &["events", &run]);
    assert!(
        text.stdout.contains("unknown_outcome  pay")
            && text.stdout.contains(r#""then":"repeated""#),
        "{}",
        text.stdout
    );
    let runs = reel_in(dir.path(), &["runs"]);
    assert!(
        runs.stdout.contains("unknown outcome: pay repeated"),
        "{}",
        runs.stdout
    );
    let runs = json(&reel_in(dir.path(), &["runs", "--json"]));
    assert_eq!(
        runs[0]["unknown_outcomes"],
        serde_json::json!([{"step": "pay", "index": null, "attempt": 1, "then": "repeated"}])
    );
}

/// Resumes `run` with `args` after it; its `--json` object and exit status.
fn resume(dir: &Path, run: &str, args: &[&str]) -> (i32, Value, String) {
    let mut all = vec!["resume", run, "--json"];
    all.extend_from_slice(args);
    let r = reel_in(dir, &all);
    let out = if r.stdout.trim().is_empty() {
        Value::Null
    } else {
        json(&r)
    };
    (r.status, out, r.stderr)
}

/// A `repeat: "never"` run killed at its effect and resumed: it fails naming the step, and
/// fails again on every resume, without calling the tool, until a person decides.
fn held_run(dir: &Path) -> String {
    let run = killed_run(dir, Some("never"));
    for _ in 0..2 {
        let (status, out, _) = resume(dir, &run, &[]);
        assert_eq!(status, 1, "{out}");
        assert_eq!(out["status"], "failed", "{out}");
        assert_eq!(out["error"]["code"], "run.unknown-outcome", "{out}");
        assert_eq!(out["error"]["step"], "pay", "{out}");
        let message = out["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("reel resume {run} --accept pay=JSON"))
                && message.contains(&format!("reel resume {run} --retry pay")),
            "{message}"
        );
    }
    assert_eq!(calls(dir).len(), 1, "the tool was not called again");
    let held = events(dir, &run, "unknown_outcome");
    assert_eq!(held.len(), 2, "{held:?}");
    assert!(held.iter().all(|e| e["data"]["then"] == "held"), "{held:?}");
    let runs = reel_in(dir, &["runs"]);
    assert!(
        runs.stdout.contains("failed") && runs.stdout.contains("unknown outcome: pay held"),
        "{}",
        runs.stdout
    );
    run
}

#[test]
fn a_never_repeated_effect_of_unknown_outcome_takes_the_result_a_person_accepts() {
    let dir = temp();
    let run = held_run(dir.path());
    let key = events(dir.path(), &run, "step_started")[0]["data"]["key"].clone();

    // A decision that names no such call, or a result of the wrong type, records nothing.
    let before = events(dir.path(), &run, "run_resumed").len();
    for (arg, says) in [
        ("total=1", "`total` has no call whose outcome is unknown"),
        ("nope=1", "the flow has no step `nope`"),
        (
            r#"pay={"paid": "five"}"#,
            "the result given for `pay` does not fit its type",
        ),
        ("pay={", "the result is not JSON"),
    ] {
        let (status, out, stderr) = resume(dir.path(), &run, &["--accept", arg]);
        assert_eq!(status, 2, "{arg}: {out} {stderr}");
        assert!(stderr.contains(says), "{arg}: {stderr}");
    }
    assert_eq!(events(dir.path(), &run, "run_resumed").len(), before);
    let runs = json(&reel_in(dir.path(), &["runs", "--json"]));
    assert_eq!(
        runs[0]["status"], "failed",
        "a refused decision leaves the run as it was"
    );

    let (status, out, stderr) = resume(dir.path(), &run, &["--accept", r#"pay={"paid": 4}"#]);
    assert_eq!(status, 0, "{out} {stderr}");
    assert_eq!(out["status"], "succeeded");
    assert_eq!(out["output"], 5, "the accepted result is the step's value");
    assert_eq!(calls(dir.path()).len(), 1, "the tool was not called");
    let unknown = events(dir.path(), &run, "unknown_outcome");
    assert_eq!(unknown.last().unwrap()["data"]["then"], "accepted");
    let recorded = events(dir.path(), &run, "effect_recorded");
    let pay: Vec<&Value> = recorded.iter().filter(|e| e["step"] == "pay").collect();
    assert_eq!(pay.len(), 1);
    assert_eq!(
        pay[0]["data"]["key"], key,
        "recorded under the key it started with"
    );
}

#[test]
fn a_never_repeated_effect_of_unknown_outcome_is_attempted_again_when_a_person_says_retry() {
    let dir = temp();
    let run = held_run(dir.path());
    let key = calls(dir.path())[0].clone();
    let (status, out, stderr) = resume(dir.path(), &run, &["--retry", "pay"]);
    assert_eq!(status, 0, "{out} {stderr}");
    assert_eq!(out["status"], "succeeded");
    assert_eq!(out["output"], 6);
    assert_eq!(
        calls(dir.path()),
        vec![key.clone(), key],
        "called again with its first key"
    );
    let unknown = events(dir.path(), &run, "unknown_outcome");
    assert_eq!(unknown.last().unwrap()["data"]["then"], "retried");
    // A decision about a run that has no call of unknown outcome left is refused.
    let (status, _, stderr) = resume(dir.path(), &run, &["--retry", "pay"]);
    assert_eq!(status, 2, "{stderr}");
    assert!(stderr.contains("succeeded"), "{stderr}");
}
