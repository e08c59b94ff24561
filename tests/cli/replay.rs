//! `reel replay`, `reel replay --flow` and `reel fork` (docs/cli.md): a replay is answered from
//! the journal alone; a fork reuses what still matches and calls only the rest.

use std::fs;
use std::io::ErrorKind;
use std::net::TcpListener;
use std::path::Path;

use serde_json::json;

use crate::support::{
    KILLING_PAY_SH, Run, TestServer, calls, damage_journal_row, json, reel_env, store_db, temp,
    write,
};

fn home(dir: &Path) -> String {
    dir.join(".reel").display().to_string()
}

fn reel_at(dir: &Path, args: &[&str]) -> Run {
    reel_env(dir, args, &[("REEL_HOME", &home(dir))])
}

/// The same, sorted: calls made in parallel log in any order.
fn sorted_calls(dir: &Path) -> Vec<String> {
    let mut all = calls(dir);
    all.sort();
    all
}

/// An `exec` step that logs its call and prints `text`.
fn logged(name: &str, text: &str, extra: &str) -> String {
    format!(
        "  step {name} = exec {{\n    cmd: [\"sh\", \"-c\", \"echo {name} >> calls.log; echo {text}\"]\n{extra}  }}\n"
    )
}

#[test]
fn a_replay_needs_no_network_no_tool_and_no_secret() {
    let dir = temp();
    let server = TestServer::start(Box::new(|_, _| (200, r#"{"n": 41}"#.to_string())));
    let flow = format!(
        "flow f {{\n  input name: string = \"ada\"\n  secret api\n  step g = http.get {{\n    url: \"{}/data\"\n    bearer: secret.api\n  }}\n  step shout = upper(input.name)\n{}  output {{ n: g.body.n + 1, shout: shout, note: trim(note.stdout) }}\n}}\n",
        server.base,
        logged("note", "${shout}", "")
    );
    write(dir.path(), "f.reel", &flow);
    let h = home(dir.path());
    let r = reel_env(
        dir.path(),
        &["run", "f.reel", "--json"],
        &[("REEL_HOME", &h), ("REEL_SECRET_API", "tok")],
    );
    assert_eq!(r.status, 0, "{r:?}");
    let run = json(&r)["run"].as_str().unwrap().to_string();
    let expected = json!({ "n": 42, "shout": "ADA", "note": "ADA" });
    assert_eq!(json(&r)["output"], expected);
    assert_eq!(server.requests().len(), 1);
    assert_eq!(calls(dir.path()), ["note"]);

    // The server is gone; a listener on its port counts any connection attempt.
    let port = server.base.rsplit(':').next().unwrap().to_string();
    drop(server);
    // The server's own acceptor thread lets the port go a moment after it stops.
    let mut bound = None;
    for _ in 0..100 {
        match TcpListener::bind(format!("127.0.0.1:{port}")) {
            Ok(l) => {
                bound = Some(l);
                break;
            }
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    }
    let listener = bound.expect("the stopped server's port is free again");
    listener.set_nonblocking(true).unwrap();

    let journal = reel_at(dir.path(), &["events", &run, "--json"]).stdout;
    let db = fs::read(dir.path().join(".reel/reel.db")).unwrap();
    let r = reel_at(dir.path(), &["replay", &run, "--verify", "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert_eq!(
        fs::read(dir.path().join(".reel/reel.db")).unwrap(),
        db,
        "the replay wrote nothing"
    );
    assert_eq!(
        reel_at(dir.path(), &["events", &run, "--json"]).stdout,
        journal
    );
    let out = json(&r);
    assert_eq!(out["status"], "succeeded");
    assert_eq!(out["output"], expected);
    assert_eq!(out["divergence"], serde_json::Value::Null);
    assert_eq!(
        out["calls"], 2,
        "the http and the exec call are answered: {out}"
    );
    assert!(r.stderr.contains("reproduces its record"), "{}", r.stderr);
    assert!(
        r.stderr.contains("shout"),
        "the steps are shown: {}",
        r.stderr
    );
    match listener.accept() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        other => panic!("the replay tried to connect: {other:?}"),
    }
    assert_eq!(calls(dir.path()), ["note"], "no tool process ran");

    // Without --json the output is printed as `reel run` prints it.
    let r = reel_at(dir.path(), &["replay", &run]);
    assert_eq!(r.status, 0, "{r:?}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&r.stdout).unwrap(),
        expected
    );
}

#[test]
fn verify_names_the_step_and_both_values_of_a_changed_builtin() {
    let dir = temp();
    write(
        dir.path(),
        "f.reel",
        "flow f {\n  input name: string = \"ada\"\n  step base = echo { value: input.name }\n  step shout = upper(base)\n  step after = echo { value: shout + \"!\" }\n  output after\n}\n",
    );
    let r = reel_at(dir.path(), &["run", "f.reel", "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    let run = json(&r)["run"].as_str().unwrap().to_string();
    let h = home(dir.path());
    let r = reel_env(
        dir.path(),
        &["replay", &run, "--verify"],
        &[("REEL_HOME", &h), ("REEL_TEST_FAULT", "builtin:upper")],
    );
    assert_eq!(r.status, 1, "{r:?}");
    assert!(
        r.stderr.contains("diverged at step `shout` (f.reel:4)"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("its output differs"), "{}", r.stderr);
    assert!(r.stderr.contains("recorded: \"ADA\""), "{}", r.stderr);
    assert!(
        r.stderr.contains("replayed: \"ADA\u{2020}\""),
        "{}",
        r.stderr
    );
    assert_eq!(r.stdout, "", "no output of a diverged replay");
    // The same replay without the fault reproduces the record.
    let r = reel_at(dir.path(), &["replay", &run, "--verify"]);
    assert_eq!(r.status, 0, "{r:?}");
}

#[test]
fn a_replay_of_an_unknown_run_is_bad_usage() {
    let dir = temp();
    write(dir.path(), "f.reel", "flow f {\n  output 1\n}\n");
    assert_eq!(reel_at(dir.path(), &["run", "f.reel"]).status, 0);
    let r = reel_at(dir.path(), &["replay", "nope"]);
    assert_eq!(r.status, 2, "{r:?}");
}

/// A flow of four steps: `a` feeds `b` (pure) feeds `c`; `d` stands alone.
fn four(c_text: &str) -> String {
    format!(
        "flow f {{\n{}  step b = upper(trim(a.stdout))\n{}{}  output {{ c: trim(c.stdout), d: trim(d.stdout) }}\n}}\n",
        logged("a", "a", ""),
        logged("c", c_text, ""),
        logged("d", "d", "")
    )
    .replace("echo c >> calls.log; echo ", "echo c >> calls.log; echo ${b}-")
}

fn plan(dir: &Path, run: &str, file: &str) -> (Run, serde_json::Value) {
    let r = reel_at(dir, &["replay", run, "--flow", file, "--json"]);
    let v = json(&r);
    (r, v)
}

fn live_steps(v: &serde_json::Value) -> Vec<String> {
    v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["reuse"] == false)
        .map(|s| s["step"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_corrected_flow_is_checked_against_the_history() {
    let dir = temp();
    write(dir.path(), "f.reel", &four("one"));
    let r = reel_at(dir.path(), &["run", "f.reel", "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    let run = json(&r)["run"].as_str().unwrap().to_string();
    assert_eq!(calls(dir.path()).len(), 3);

    // The same flow, commented, reformatted and with independent steps reordered.
    let same = four("one")
        .replace("flow f {\n", "/// Documented.\nflow f {\n  // a comment\n")
        .replace("  step b = upper(trim(a.stdout))\n", "")
        .replace(
            "  output",
            "  step b = upper( trim( a.stdout ) )\n\n  output",
        );
    write(dir.path(), "same.reel", &same);
    let (r, v) = plan(dir.path(), &run, "same.reel");
    assert_eq!(r.status, 0, "{r:?}\n{v}");
    assert_eq!(v["compatible"], true);
    assert!(live_steps(&v).is_empty(), "{v}");

    // `c`'s arguments change: `c` alone runs live, and the reason says so.
    write(dir.path(), "edit.reel", &four("two"));
    let (r, v) = plan(dir.path(), &run, "edit.reel");
    assert_eq!(r.status, 1, "{r:?}");
    assert_eq!(live_steps(&v), ["c"], "{v}");
    assert_eq!(v["first_divergence"]["step"], "c");
    assert_eq!(v["first_divergence"]["reason"], "changed arguments");

    // `b` changes: `b` and what depends on it (`c`) diverge, `a` and `d` are reused.
    let upstream = four("one").replace("upper(trim(a.stdout))", "lower(trim(a.stdout))");
    write(dir.path(), "up.reel", &upstream);
    let (r, v) = plan(dir.path(), &run, "up.reel");
    assert_eq!(r.status, 1, "{r:?}");
    assert_eq!(live_steps(&v), ["b", "c"], "{v}");
    let c = &v["steps"].as_array().unwrap()[2];
    assert_eq!(
        c["reason"], "changed inputs: upstream step `b` changed",
        "{v}"
    );

    // `d` is now skipped: its condition changed, nothing else did.
    let skipped = four("one")
        .replace("echo d\"]\n", "echo d\"]\n    when: len(a.stdout) > 100\n")
        .replace("trim(d.stdout)", "trim(d?.stdout ?? \"\")");
    assert_ne!(skipped, four("one"));
    write(dir.path(), "skip.reel", &skipped);
    let (r, v) = plan(dir.path(), &run, "skip.reel");
    assert_eq!(r.status, 1, "{r:?}");
    assert_eq!(live_steps(&v), ["d"], "{v}");
    assert_eq!(
        v["first_divergence"]["reason"],
        "changed condition: its `when` decides otherwise"
    );

    // The text form names each step's verdict.
    let r = reel_at(dir.path(), &["replay", &run, "--flow", "edit.reel"]);
    assert_eq!(r.status, 1, "{r:?}");
    assert!(r.stdout.contains("reuse  a"), "{}", r.stdout);
    assert!(
        r.stdout
            .contains("live   c (1 call live): changed arguments"),
        "{}",
        r.stdout
    );
    assert!(
        r.stderr.contains("diverges first at step `c`"),
        "{}",
        r.stderr
    );
    assert_eq!(
        sorted_calls(dir.path()),
        ["a", "c", "d"],
        "a dry run calls nothing"
    );
}

/// Ten steps in a chain; step 9 exits with `nine_exit`.
fn ten(nine_exit: u8) -> String {
    let mut steps = String::new();
    for i in 1..=10 {
        let prev = if i == 1 {
            String::new()
        } else {
            format!("    after: [s{}]\n", i - 1)
        };
        let exit = if i == 9 {
            format!("; exit {nine_exit}")
        } else {
            String::new()
        };
        steps.push_str(&format!(
            "  step s{i} = exec {{\n    cmd: [\"sh\", \"-c\", \"echo s{i} >> calls.log; echo s{i}{exit}\"]\n{prev}  }}\n"
        ));
    }
    format!("flow ten {{\n{steps}  output [s1.stdout, s9.stdout, s10.stdout]\n}}\n")
}

#[test]
fn a_fork_of_a_failed_run_calls_only_the_fixed_step_and_what_follows() {
    let dir = temp();
    write(dir.path(), "ten.reel", &ten(3));
    let r = reel_at(dir.path(), &["run", "ten.reel", "--json"]);
    assert_eq!(r.status, 1, "{r:?}");
    let run = json(&r)["run"].as_str().unwrap().to_string();
    let before: Vec<String> = (1..=9).map(|i| format!("s{i}")).collect();
    assert_eq!(calls(dir.path()), before);

    write(dir.path(), "fixed.reel", &ten(0));
    let (r, v) = plan(dir.path(), &run, "fixed.reel");
    assert_eq!(r.status, 1, "{r:?}");
    assert_eq!(live_steps(&v), ["s9", "s10"], "{v}");

    let r = reel_at(
        dir.path(),
        &["fork", &run, "--flow", "fixed.reel", "--json"],
    );
    assert_eq!(r.status, 0, "{r:?}");
    let forked = json(&r);
    assert_eq!(forked["status"], "succeeded");
    assert_eq!(forked["parent"], run.as_str());
    assert_eq!(forked["reused"], 8);
    assert_eq!(forked["live"], 2);
    let mut after = before.clone();
    after.extend(["s9".to_string(), "s10".to_string()]);
    assert_eq!(calls(dir.path()), after, "steps 1-8 were not called again");
    let fork_id = forked["run"].as_str().unwrap().to_string();

    // Its journal says what was reused, and from where.
    let r = reel_at(dir.path(), &["events", &fork_id, "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    let events = json(&r);
    let reused: Vec<&serde_json::Value> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "call_reused")
        .collect();
    assert_eq!(reused.len(), 8, "{events}");
    assert!(
        reused.iter().all(|e| e["data"]["parent"] == run.as_str()),
        "{reused:?}"
    );

    // Its output is a fresh run's.
    let fresh = temp();
    write(fresh.path(), "ten.reel", &ten(0));
    let r = reel_at(fresh.path(), &["run", "ten.reel", "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert_eq!(json(&r)["output"], forked["output"]);

    // `reel runs` names the parent; a replay of the fork reproduces it; a fork can be forked.
    let r = reel_at(dir.path(), &["runs"]);
    assert!(r.stdout.contains(&format!("fork of {run}")), "{}", r.stdout);
    let r = reel_at(dir.path(), &["replay", &fork_id, "--verify"]);
    assert_eq!(r.status, 0, "{r:?}");
    let r = reel_at(
        dir.path(),
        &["fork", &fork_id, "--flow", "fixed.reel", "--json"],
    );
    assert_eq!(r.status, 0, "{r:?}");
    assert_eq!(json(&r)["reused"], 10);
    assert_eq!(json(&r)["live"], 0);
    assert_eq!(
        calls(dir.path()),
        after,
        "a fork of a fork reuses everything"
    );
}

#[test]
fn a_failure_of_the_flow_points_at_fork() {
    let dir = temp();
    write(
        dir.path(),
        "f.reel",
        "flow f {\n  input n: string = \"x\"\n  step a = echo { value: input.n }\n  step b = to_int(a)\n  output b\n}\n",
    );
    let r = reel_at(dir.path(), &["run", "f.reel", "--json"]);
    assert_eq!(r.status, 1, "{r:?}");
    let run = json(&r)["run"].as_str().unwrap().to_string();
    assert!(
        r.stderr.contains(&format!("reel fork {run} --flow FILE"))
            && r.stderr.contains(&format!("reel replay {run} --flow FILE")),
        "{}",
        r.stderr
    );
}

#[test]
fn a_fork_of_a_grown_foreach_calls_only_the_new_elements() {
    let dir = temp();
    write(
        dir.path(),
        "each.reel",
        "flow each {\n  input items: list<string>\n  step e = exec {\n    foreach: input.items\n    cmd: [\"sh\", \"-c\", \"echo ${item} >> calls.log; echo ${item}\"]\n  }\n  output [for x in e: trim(x.stdout)]\n}\n",
    );
    let r = reel_at(
        dir.path(),
        &[
            "run",
            "each.reel",
            "--input",
            r#"items=["a","b"]"#,
            "--json",
        ],
    );
    assert_eq!(r.status, 0, "{r:?}");
    let run = json(&r)["run"].as_str().unwrap().to_string();
    assert_eq!(sorted_calls(dir.path()), ["a", "b"]);
    // A flow whose list grew: the dry run reuses the recorded elements and names the new one.
    let grown = fs::read_to_string(dir.path().join("each.reel"))
        .unwrap()
        .replace("foreach: input.items", "foreach: input.items + [\"c\"]");
    write(dir.path(), "grown.reel", &grown);
    let (r, v) = plan(dir.path(), &run, "grown.reel");
    assert_eq!(r.status, 1, "{r:?}");
    let e = &v["steps"][0];
    assert_eq!(e["reason"], "new elements: [2]", "{v}");
    assert_eq!(
        (e["reused_calls"].clone(), e["live_calls"].clone()),
        (json!(2), json!(1))
    );
    let r = reel_at(
        dir.path(),
        &[
            "fork",
            &run,
            "--flow",
            "each.reel",
            "--input",
            r#"items=["a","b","c"]"#,
            "--json",
        ],
    );
    assert_eq!(r.status, 0, "{r:?}");
    let v = json(&r);
    assert_eq!(v["output"], json!(["a", "b", "c"]));
    assert_eq!(v["reused"], 2);
    assert_eq!(v["live"], 1);
    let made = calls(dir.path());
    assert_eq!(made.len(), 3, "{made:?}");
    assert_eq!(made[2], "c", "only the new element is called: {made:?}");
}

#[test]
fn a_run_that_parked_retried_and_drew_replays_to_the_same_values() {
    let dir = temp();
    // approval: parks for a signal, then for a timer, and reads `now()` after each.
    let approval = crate::support::examples_dir().join("approval.reel");
    let r = reel_at(
        dir.path(),
        &[
            "run",
            &approval.display().to_string(),
            "--input",
            "request=deploy",
            "--input",
            "cooldown=1s",
            "--json",
        ],
    );
    assert_eq!(json(&r)["status"], "waiting", "{r:?}");
    let id = json(&r)["run"].as_str().unwrap().to_string();
    let s = reel_at(
        dir.path(),
        &[
            "signal",
            &id,
            "approve",
            r#"{"approved": true, "by": "ada"}"#,
        ],
    );
    assert_eq!(s.status, 0, "{s:?}");
    let w = reel_at(dir.path(), &["worker", "--until-idle", "--poll-ms", "50"]);
    assert_eq!(w.status, 0, "{w:?}");
    let r = reel_at(dir.path(), &["replay", &id, "--verify", "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert_eq!(json(&r)["status"], "succeeded", "{r:?}");
    assert!(
        json(&r)["output"]["message"]
            .as_str()
            .unwrap()
            .starts_with("approved by ada at "),
        "{r:?}"
    );

    // A retried call (exit 75 once), a skipped step, a `foreach`, `random()` and `now()`.
    write(
        dir.path(),
        "mixed.reel",
        "flow mixed {\n  step flaky = exec {\n    cmd: [\"sh\", \"-c\", \"if [ -e once ]; then echo ok; else touch once; exit 75; fi\"]\n    retry: { max: 3, backoff: \"exp\", base: 20ms, jitter: true }\n  }\n  step never = echo {\n    value: 1\n    when: false\n  }\n  step each = echo {\n    foreach: [1, 2, 3]\n    value: item * 10\n  }\n  step draw = { r: random(), at: now(), f: trim(flaky.stdout), n: len(each) }\n  output draw\n}\n",
    );
    let r = reel_at(dir.path(), &["run", "mixed.reel", "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    let id = json(&r)["run"].as_str().unwrap().to_string();
    let output = json(&r)["output"].clone();
    let r = reel_at(dir.path(), &["replay", &id, "--verify", "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert_eq!(json(&r)["output"], output);
    assert_eq!(
        json(&r)["calls"],
        5,
        "two attempts and three elements: {r:?}"
    );
}

#[test]
fn a_call_the_record_does_not_have_is_a_divergence() {
    let dir = temp();
    write(
        dir.path(),
        "f.reel",
        "flow f {\n  step n = echo { value: [\"a\", \"b\"] }\n  step each = echo {\n    foreach: range(len(n))\n    value: item\n  }\n  output each\n}\n",
    );
    let r = reel_at(dir.path(), &["run", "f.reel", "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    let run = json(&r)["run"].as_str().unwrap().to_string();
    // `len` answers one more: the replay makes a third call, which the record lacks.
    let h = home(dir.path());
    for verify in [true, false] {
        let mut args = vec!["replay", run.as_str(), "--json"];
        if verify {
            args.push("--verify");
        }
        let r = reel_env(
            dir.path(),
            &args,
            &[("REEL_HOME", &h), ("REEL_TEST_FAULT", "builtin:len")],
        );
        assert_eq!(r.status, 1, "{r:?}");
        let d = &json(&r)["divergence"];
        assert_eq!(d["step"], "each", "{d}");
        assert_eq!(d["index"], 2, "{d}");
        assert_eq!(
            d["what"], "the replay makes a call the record does not have (attempt 1)",
            "{d}"
        );
        assert_eq!(d["source"]["line"], 3, "{d}");
        assert_eq!(json(&r)["status"], "diverged");
    }
}

#[test]
fn a_run_canceled_after_its_process_died_mid_call_replays_to_its_cancel() {
    let dir = temp();
    write(
        dir.path(),
        "flow.reel",
        "tool pay {\n  kind: \"effect\"\n  exec: [\"sh\", \"pay.sh\"]\n  input { amount: int }\n  output { paid: int }\n}\n\nflow shop {\n  step pay = pay { amount: 5 }\n  step total = pay.paid + 1\n  output total\n}\n",
    );
    write(dir.path(), "pay.sh", KILLING_PAY_SH);
    // The tool kills `reel` between the effect's start (synced: durable) and its result.
    let out = crate::support::reel(
        dir.path(),
        &["run", "flow.reel", "--durability", "durable", "--json"],
    )
    .env("REEL_HOME", home(dir.path()))
    .output()
    .expect("reel starts");
    assert_eq!(out.status.code(), None, "reel was killed: {out:?}");
    let runs = json(&reel_at(dir.path(), &["runs", "--json"]));
    assert_eq!(runs[0]["status"], "running", "{runs}");
    let run = runs[0]["run"].as_str().unwrap().to_string();
    let c = reel_at(dir.path(), &["cancel", &run]);
    assert_eq!(c.status, 0, "{c:?}");
    // The record: the call started, never answered, then the cancel.
    let events = json(&reel_at(dir.path(), &["events", &run, "--json"]));
    let kinds: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    assert_eq!(
        kinds,
        ["run_started", "step_started", "run_finished"],
        "{events}"
    );
    for verify in [false, true] {
        let mut args = vec!["replay", run.as_str(), "--json"];
        if verify {
            args.push("--verify");
        }
        let r = reel_at(dir.path(), &args);
        assert_eq!(r.status, 0, "{r:?}");
        let out = json(&r);
        assert_eq!(out["status"], "canceled", "{out}");
        assert_eq!(out["divergence"], serde_json::Value::Null, "{out}");
        assert_eq!(out["error"]["code"], "run.canceled", "{out}");
        assert_eq!(out["calls"], 0, "{out}");
    }
    // Nothing was called again: the tool logged its one call only.
    assert_eq!(calls(dir.path()).len(), 1);
}

/// A chain of `n` `echo` steps, each adding `step` to the one before from `s{edit}` on (1
/// before it); the output is the last.
fn chain(n: usize, edit: usize, step: u32) -> String {
    let mut s = String::from("flow f {\n  step s0 = echo { value: 0 }\n");
    for i in 1..n {
        let add = if i >= edit { step } else { 1 };
        s.push_str(&format!(
            "  step s{i} = echo {{ value: s{} + {add} }}\n",
            i - 1
        ));
    }
    s.push_str(&format!("  output s{}\n}}\n", n - 1));
    s
}

/// A flow of thousands of steps takes the replayer's other road: its first machine is made
/// on a thread beside the replayer, its journal (over 6,000 events) is read in stretches on
/// two threads, and the record is freed on two threads. The replay, the check of a corrected
/// flow and the fork come out as they do for a small flow; so does a replay that reads the
/// FlowSpec's JSON because its binary form is damaged or gone; and a hole in a later stretch
/// is refused, named by its row.
#[test]
fn a_flow_of_thousands_of_steps_replays_checks_and_forks_as_a_small_one() {
    const N: usize = 2100;
    let dir = temp();
    write(dir.path(), "f.reel", &chain(N, N, 1));
    let r = reel_at(dir.path(), &["run", "f.reel", "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    let run = json(&r)["run"].as_str().unwrap().to_string();
    assert_eq!(json(&r)["output"], N - 1);

    let r = reel_at(dir.path(), &["replay", &run, "--verify", "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert_eq!(json(&r)["output"], N - 1, "{r:?}");

    // The run kept its FlowSpec's binary form beside the JSON; damaged, then gone, the JSON
    // is read instead and the replay is the same.
    let db = store_db(dir.path());
    let binaries = |db: &rusqlite::Connection| -> i64 {
        db.query_row(
            "SELECT COUNT(*) FROM spec_binaries b JOIN runs r ON r.flow_digest = b.digest
             WHERE r.id = ?1",
            [&run],
            |r| r.get(0),
        )
        .unwrap()
    };
    assert_eq!(binaries(&db), 1);
    for damage in [
        "UPDATE spec_binaries SET bytes = substr(bytes, 1, length(bytes) / 2)",
        "DELETE FROM spec_binaries",
    ] {
        db.execute(damage, []).unwrap();
        let r = reel_at(dir.path(), &["replay", &run, "--verify", "--json"]);
        assert_eq!(r.status, 0, "{damage}: {r:?}");
        assert_eq!(json(&r)["output"], N - 1, "{damage}: {r:?}");
    }

    // From `s2000` on each step adds 2: those 100 steps run live, the 2,000 before are reused.
    write(dir.path(), "edit.reel", &chain(N, 2000, 2));
    let (r, v) = plan(dir.path(), &run, "edit.reel");
    assert_eq!(r.status, 1, "{r:?}");
    let live = live_steps(&v);
    assert_eq!(live.len(), 100, "{v}");
    assert_eq!(live[0], "s2000");
    assert_eq!(v["first_divergence"]["step"], "s2000");
    assert_eq!(v["first_divergence"]["reason"], "changed arguments");

    let r = reel_at(dir.path(), &["fork", &run, "--flow", "edit.reel", "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    let forked = json(&r);
    assert_eq!(forked["reused"], 2000, "{forked}");
    assert_eq!(forked["live"], 100, "{forked}");
    assert_eq!(forked["output"], 1999 + 2 * 100, "{forked}");

    // A row of the second stretch that cannot be read stops the replay, which names it.
    let events: i64 = db
        .query_row("SELECT COUNT(*) FROM journal WHERE run = ?1", [&run], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(events > 6000, "{events}");
    damage_journal_row(dir.path(), &run, 5000);
    let r = reel_at(dir.path(), &["replay", &run]);
    assert_ne!(r.status, 0, "{r:?}");
    assert!(
        r.stderr
            .contains(&format!("run {run} has an unreadable journal row at 5000")),
        "{}",
        r.stderr
    );
}
