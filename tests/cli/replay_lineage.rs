//! `reel replay --rerun`, `reel runs --tree`, replays of redriven and canceled runs, and signals
//! carried into forks and reruns (docs/cli.md, docs/runtime.md "Replay and fork").

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Run, TestServer, calls, json, reel, reel_env, temp, write};

fn home(dir: &Path) -> String {
    dir.join(".reel").display().to_string()
}

fn reel_at(dir: &Path, args: &[&str]) -> Run {
    reel_env(dir, args, &[("REEL_HOME", &home(dir))])
}

fn events(dir: &Path, run: &str) -> Vec<Value> {
    let r = reel_at(dir, &["events", run, "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    json(&r).as_array().unwrap().clone()
}

/// The idempotency key each `step_started` of `step` recorded.
fn keys(dir: &Path, run: &str, step: &str) -> Vec<String> {
    events(dir, run)
        .iter()
        .filter(|e| e["kind"] == "step_started" && e["step"] == step)
        .filter_map(|e| e["data"]["key"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn a_rerun_answers_reads_from_the_journal_and_makes_effects_again_with_its_own_keys() {
    let dir = temp();
    let server = TestServer::start(Box::new(|r, n| match r.method.as_str() {
        "GET" => (200, r#"{"p": 3}"#.to_string()),
        _ => (200, format!(r#"{{"ok": true, "n": {n}}}"#)),
    }));
    let flow = format!(
        "flow pay {{\n  input amount: int = 5\n  secret api\n  step price = http.get {{\n    url: \"{b}/price\"\n    bearer: secret.api\n  }}\n  step charge = http.post {{\n    url: \"{b}/charge\"\n    json: {{ amount: input.amount * price.body.p }}\n    bearer: secret.api\n  }}\n  output {{ price: price.body.p, ok: charge.body.ok }}\n}}\n",
        b = server.base
    );
    write(dir.path(), "pay.reel", &flow);
    let h = home(dir.path());
    let r = reel_env(
        dir.path(),
        &["run", "pay.reel", "--input", "amount=7", "--json"],
        &[("REEL_HOME", &h), ("REEL_SECRET_API", "one")],
    );
    assert_eq!(r.status, 0, "{r:?}");
    let run = json(&r)["run"].as_str().unwrap().to_string();
    let first = server.requests();
    assert_eq!(first.len(), 2, "{first:?}");
    let parent_key = keys(dir.path(), &run, "charge");
    assert_eq!(parent_key.len(), 1);
    assert_eq!(
        first[1].header("idempotency-key"),
        Some(parent_key[0].as_str())
    );

    // Without its secret, a rerun is refused before anything is recorded.
    let r = reel_at(dir.path(), &["replay", &run, "--rerun"]);
    assert_eq!(r.status, 2, "{r:?}");
    assert!(r.stderr.contains("REEL_SECRET_API"), "{}", r.stderr);
    assert_eq!(
        json(&reel_at(dir.path(), &["runs", "--json"]))
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(server.requests().len(), 2);

    // With a new secret: the read is answered from the journal, the effect is made again.
    let r = reel_env(
        dir.path(),
        &["replay", &run, "--rerun", "--json"],
        &[("REEL_HOME", &h), ("REEL_SECRET_API", "two")],
    );
    assert_eq!(r.status, 0, "{r:?}");
    let out = json(&r);
    assert_eq!(out["status"], "succeeded", "{out}");
    assert_eq!(out["output"], json!({ "price": 3, "ok": true }));
    assert_eq!(out["parent"], run.as_str());
    assert_eq!(
        (out["reused"].clone(), out["live"].clone()),
        (json!(1), json!(1))
    );
    let rerun = out["run"].as_str().unwrap().to_string();
    assert_ne!(rerun, run);
    let all = server.requests();
    assert_eq!(all.len(), 3, "one request more, the effect: {all:?}");
    let again = &all[2];
    assert_eq!(
        (again.method.as_str(), again.url.as_str()),
        ("POST", "/charge")
    );
    assert_eq!(again.body, first[1].body, "the same inputs (the run's own)");
    assert_eq!(again.header("authorization"), Some("Bearer two"));
    let rerun_key = keys(dir.path(), &rerun, "charge");
    assert_eq!(again.header("idempotency-key"), Some(rerun_key[0].as_str()));
    assert_ne!(rerun_key, parent_key, "the rerun's key is its own");

    // Its journal: the read reused from the parent's event, the effect recorded anew.
    let journal = events(dir.path(), &rerun);
    assert_eq!(journal[0]["data"]["rerun"], true, "{}", journal[0]);
    let reused: Vec<&Value> = journal
        .iter()
        .filter(|e| e["kind"] == "call_reused")
        .collect();
    assert_eq!(reused.len(), 1, "{journal:?}");
    assert_eq!(reused[0]["step"], "price");
    assert_eq!(reused[0]["data"]["parent"], run.as_str());
    // The parent's run_started has no `rerun` field: other runs' records are as they were.
    assert_eq!(events(dir.path(), &run)[0]["data"].get("rerun"), None);

    // `reel runs` names the parent; the rerun replays hermetically like any run.
    let r = reel_at(dir.path(), &["runs"]);
    assert!(r.stdout.contains(&format!("fork of {run}")), "{}", r.stdout);
    let r = reel_at(dir.path(), &["replay", &rerun, "--verify"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert_eq!(server.requests().len(), 3);
    let r = reel_at(dir.path(), &["replay", &run, "--rerun", "--verify"]);
    assert_eq!(r.status, 2, "--rerun and --verify conflict: {r:?}");
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
            "  step s{i} = exec {{\n    cmd: [\"sh\", \"-c\", \"echo s{i}{exit}\"]\n{prev}  }}\n"
        ));
    }
    format!("flow ten {{\n{steps}  output [s1.stdout, s10.stdout]\n}}\n")
}

#[test]
fn the_tree_shows_a_run_with_its_forks_and_reruns() {
    let dir = temp();
    write(dir.path(), "ten.reel", &ten(3));
    write(dir.path(), "fixed.reel", &ten(0));
    let id = |r: &Run| json(r)["run"].as_str().unwrap().to_string();
    let root = reel_at(dir.path(), &["run", "ten.reel", "--json"]);
    assert_eq!(root.status, 1, "{root:?}");
    let root = id(&root);
    let fork = reel_at(
        dir.path(),
        &["fork", &root, "--flow", "fixed.reel", "--json"],
    );
    assert_eq!(fork.status, 0, "{fork:?}");
    let fork = id(&fork);
    let rerun = reel_at(dir.path(), &["replay", &root, "--rerun", "--json"]);
    assert_eq!(rerun.status, 1, "the rerun fails again: {rerun:?}");
    let rerun = id(&rerun);
    let grandchild = reel_at(
        dir.path(),
        &["fork", &fork, "--flow", "fixed.reel", "--json"],
    );
    assert_eq!(grandchild.status, 0, "{grandchild:?}");
    let grandchild = id(&grandchild);
    // A run outside the tree is not shown.
    let other = reel_at(dir.path(), &["run", "fixed.reel", "--json"]);
    let other = id(&other);

    let r = reel_at(dir.path(), &["runs", "--tree", &root]);
    assert_eq!(r.status, 0, "{r:?}");
    assert!(!r.stdout.contains(&other), "{}", r.stdout);
    let mut named = r.stdout.clone();
    for (run, name) in [
        (&root, "<root>"),
        (&fork, "<fork>"),
        (&rerun, "<rerun>"),
        (&grandchild, "<fork of fork>"),
    ] {
        named = named.replace(run.as_str(), &format!("{name:<26}"));
    }
    insta::assert_snapshot!(named);

    let r = reel_at(dir.path(), &["runs", "--tree", &root[..20], "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    let t = json(&r);
    assert_eq!(t["run"], root.as_str());
    assert_eq!(t["kind"], "run");
    let kids = t["children"].as_array().unwrap();
    assert_eq!(kids.len(), 2, "{t}");
    let (f, rr) = (&kids[0], &kids[1]);
    assert_eq!(
        (f["run"].as_str(), f["kind"].as_str()),
        (Some(fork.as_str()), Some("fork"))
    );
    assert_eq!(
        (f["reused"].clone(), f["live"].clone()),
        (json!(8), json!(2))
    );
    assert_eq!(f["children"][0]["run"], grandchild.as_str());
    assert_eq!(f["children"][0]["reused"], 10);
    assert_eq!(
        (rr["kind"].as_str(), rr["status"].as_str()),
        (Some("rerun"), Some("failed"))
    );
    assert_eq!(
        (rr["reused"].clone(), rr["live"].clone()),
        (json!(0), json!(9)),
        "exec is an effect: a rerun makes it again"
    );
    let r = reel_at(dir.path(), &["runs", "--tree", "nope"]);
    assert_eq!(r.status, 2, "{r:?}");
}

#[test]
fn a_replay_of_a_redriven_run_follows_the_record_to_its_final_ending() {
    let dir = temp();
    write(
        dir.path(),
        "f.reel",
        "flow f {\n  step first = echo { value: 1 }\n  step check = exec {\n    cmd: [\"sh\", \"-c\", \"test -e ready && echo ok\"]\n    after: [first]\n  }\n  step last = echo { value: trim(check.stdout) + \"!\" }\n  output last\n}\n",
    );
    let r = reel_at(dir.path(), &["run", "f.reel", "--json"]);
    assert_eq!(r.status, 1, "{r:?}");
    let run = json(&r)["run"].as_str().unwrap().to_string();
    fs::write(dir.path().join("ready"), "").unwrap();
    let r = reel_at(dir.path(), &["resume", &run, "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert_eq!(json(&r)["output"], "ok!");
    fs::remove_file(dir.path().join("ready")).unwrap();
    let r = reel_at(dir.path(), &["replay", &run, "--verify", "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    let v = json(&r);
    assert_eq!(v["status"], "succeeded", "{v}");
    assert_eq!(v["output"], "ok!");
    assert_eq!(v["calls"], 4, "first, both attempts of check, last: {v}");
}

#[test]
fn a_replay_of_a_canceled_run_ends_canceled_and_follows_its_redrive() {
    let dir = temp();
    write(
        dir.path(),
        "f.reel",
        "flow f {\n  step a = echo { value: 1 }\n  step w = signal { name: \"go\", after: [a] }\n  step b = echo { value: w.n + a }\n  output b\n}\n",
    );
    let r = reel_at(dir.path(), &["run", "f.reel", "--json"]);
    assert_eq!(json(&r)["status"], "waiting", "{r:?}");
    let run = json(&r)["run"].as_str().unwrap().to_string();
    assert_eq!(reel_at(dir.path(), &["cancel", &run]).status, 0);
    let r = reel_at(dir.path(), &["replay", &run, "--verify", "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert_eq!(json(&r)["status"], "canceled", "{r:?}");
    assert_eq!(json(&r)["error"]["code"], "run.canceled");

    // Taken up again (a redrive), signaled, finished: the replay goes through all of it.
    let r = reel_at(dir.path(), &["resume", &run, "--json"]);
    assert_eq!(json(&r)["status"], "waiting", "{r:?}");
    let s = reel_at(dir.path(), &["signal", &run, "go", r#"{"n": 41}"#]);
    assert_eq!(s.status, 0, "{s:?}");
    let w = reel_at(dir.path(), &["worker", "--until-idle", "--poll-ms", "50"]);
    assert_eq!(w.status, 0, "{w:?}");
    let r = reel_at(dir.path(), &["replay", &run, "--verify", "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert_eq!(json(&r)["status"], "succeeded", "{r:?}");
    assert_eq!(json(&r)["output"], 42);
}

#[test]
fn a_replay_of_a_run_canceled_while_a_call_ran_ends_canceled() {
    let dir = temp();
    write(
        dir.path(),
        "f.reel",
        "flow f {\n  step a = echo { value: 1 }\n  step slow = exec {\n    cmd: [\"sh\", \"-c\", \"touch started; sleep 20\"]\n    after: [a]\n  }\n  output slow.stdout\n}\n",
    );
    let child = reel(dir.path(), &["run", "f.reel", "--json"])
        .env("REEL_HOME", home(dir.path()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // edge: the test waits for the call to start in real time.
    #[allow(clippy::disallowed_methods)]
    let began = Instant::now();
    while !dir.path().join("started").exists() {
        assert!(began.elapsed() < Duration::from_secs(30), "the call starts");
        std::thread::sleep(Duration::from_millis(20));
    }
    let runs = json(&reel_at(dir.path(), &["runs", "--json"]));
    let run = runs[0]["run"].as_str().unwrap().to_string();
    let c = reel_at(dir.path(), &["cancel", &run]);
    assert_eq!(c.status, 0, "{c:?}");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let r = reel_at(dir.path(), &["replay", &run, "--verify", "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert_eq!(json(&r)["status"], "canceled", "{r:?}");
}

/// A request, an approval signal after it, then an action that fails until `act_exit` is 0.
fn approval(act_exit: u8) -> String {
    format!(
        "flow ap {{\n  input request: string = \"deploy\"\n  step ask = echo {{ value: input.request }}\n  step ok = signal {{ name: \"approve\", after: [ask] }}\n  step act = exec {{\n    cmd: [\"sh\", \"-c\", \"echo act >> calls.log; echo ${{ok.by}}; exit {act_exit}\"]\n  }}\n  output {{ by: trim(act.stdout), asked: ask }}\n}}\n"
    )
}

#[test]
fn forks_and_reruns_carry_the_parents_consumed_signals() {
    let dir = temp();
    write(dir.path(), "ap.reel", &approval(3));
    write(dir.path(), "fixed.reel", &approval(0));
    let r = reel_at(dir.path(), &["run", "ap.reel", "--json"]);
    assert_eq!(json(&r)["status"], "waiting", "{r:?}");
    let run = json(&r)["run"].as_str().unwrap().to_string();
    let s = reel_at(dir.path(), &["signal", &run, "approve", r#"{"by": "ada"}"#]);
    assert_eq!(s.status, 0, "{s:?}");
    let w = reel_at(dir.path(), &["worker", "--until-idle", "--poll-ms", "50"]);
    assert_eq!(w.status, 0, "{w:?}");
    assert_eq!(
        json(&reel_at(dir.path(), &["runs", "--json"]))[0]["status"],
        "failed"
    );
    assert_eq!(calls(dir.path()), ["act"]);

    // The preview reuses the approval; the fork takes it and does not wait.
    let r = reel_at(
        dir.path(),
        &["replay", &run, "--flow", "fixed.reel", "--json"],
    );
    let plan = json(&r);
    let ok = plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == "ok")
        .unwrap()
        .clone();
    assert_eq!(ok["reuse"], true, "{plan}");
    let r = reel_at(
        dir.path(),
        &["fork", &run, "--flow", "fixed.reel", "--json"],
    );
    assert_eq!(r.status, 0, "{r:?}");
    let v = json(&r);
    assert_eq!(v["status"], "succeeded", "{v}");
    assert_eq!(v["output"], json!({ "by": "ada", "asked": "deploy" }));
    assert_eq!(
        (v["reused"].clone(), v["live"].clone()),
        (json!(2), json!(1)),
        "{v}"
    );
    let fork = v["run"].as_str().unwrap().to_string();
    let journal = events(dir.path(), &fork);
    let at = |kind: &str, step: &str| {
        journal
            .iter()
            .position(|e| e["kind"] == kind && e["step"] == step)
            .unwrap_or_else(|| panic!("no {kind} of {step}: {journal:?}"))
    };
    assert!(at("call_reused", "ok") < at("signal_received", "ok"));
    assert_eq!(
        journal[at("call_reused", "ok")]["data"]["parent"],
        run.as_str()
    );
    assert_eq!(calls(dir.path()), ["act", "act"]);
    // The fork's journal is complete on its own: it replays without its parent's help.
    let r = reel_at(dir.path(), &["replay", &fork, "--verify"]);
    assert_eq!(r.status, 0, "{r:?}");

    // An approval given for another request is asked again: the fork waits for its own.
    let r = reel_at(
        dir.path(),
        &[
            "fork",
            &run,
            "--flow",
            "fixed.reel",
            "--input",
            "request=drop",
            "--json",
        ],
    );
    assert_eq!(json(&r)["status"], "waiting", "{r:?}");
    let waiting = json(&r)["run"].as_str().unwrap().to_string();
    let s = reel_at(
        dir.path(),
        &["signal", &waiting, "approve", r#"{"by": "bob"}"#],
    );
    assert_eq!(s.status, 0, "{s:?}");
    let r = reel_at(dir.path(), &["resume", &waiting, "--json"]);
    assert_eq!(
        json(&r)["output"],
        json!({ "by": "bob", "asked": "drop" }),
        "{r:?}"
    );

    // A rerun carries it too: it fails at `act` again, without waiting for an approval.
    let r = reel_at(dir.path(), &["replay", &run, "--rerun", "--json"]);
    assert_eq!(json(&r)["status"], "failed", "{r:?}");
    assert_eq!(json(&r)["error"]["step"], "act", "{r:?}");
}

#[test]
fn a_fork_that_parks_before_its_signal_step_takes_the_signal_when_resumed() {
    let dir = temp();
    let flow = |exit: u8| {
        format!(
            "flow nap {{\n  step t = sleep {{ for: 1s }}\n  step ok = signal {{ name: \"approve\", after: [t] }}\n  step act = exec {{\n    cmd: [\"sh\", \"-c\", \"echo ${{ok.by}}; exit {exit}\"]\n  }}\n  output trim(act.stdout)\n}}\n"
        )
    };
    write(dir.path(), "nap.reel", &flow(3));
    write(dir.path(), "fixed.reel", &flow(0));
    let r = reel_at(dir.path(), &["run", "nap.reel", "--json"]);
    assert_eq!(json(&r)["status"], "waiting", "{r:?}");
    let run = json(&r)["run"].as_str().unwrap().to_string();
    let s = reel_at(dir.path(), &["signal", &run, "approve", r#"{"by": "ada"}"#]);
    assert_eq!(s.status, 0, "{s:?}");
    let w = reel_at(dir.path(), &["worker", "--until-idle", "--poll-ms", "50"]);
    assert_eq!(w.status, 0, "{w:?}");
    assert_eq!(
        json(&reel_at(dir.path(), &["runs", "--json"]))[0]["status"],
        "failed"
    );

    // The fork sleeps again and parks; the worker that takes it up carries the approval.
    let r = reel_at(
        dir.path(),
        &["fork", &run, "--flow", "fixed.reel", "--json"],
    );
    assert_eq!(json(&r)["status"], "waiting", "{r:?}");
    let fork = json(&r)["run"].as_str().unwrap().to_string();
    let w = reel_at(dir.path(), &["worker", "--until-idle", "--poll-ms", "50"]);
    assert_eq!(w.status, 0, "{w:?}");
    let runs = json(&reel_at(dir.path(), &["runs", "--json"]));
    let row = runs
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run"] == fork.as_str())
        .unwrap()
        .clone();
    assert_eq!(row["status"], "succeeded", "{row}");
    let journal = events(dir.path(), &fork);
    assert!(
        journal
            .iter()
            .any(|e| e["kind"] == "call_reused" && e["step"] == "ok"),
        "{journal:?}"
    );
}
