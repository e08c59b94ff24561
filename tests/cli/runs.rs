//! `reel run`, `resume`, `runs`, `events`, `logs`, `signal`, `cancel` and `worker`, end to end.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::*;

fn store_env(dir: &Path) -> String {
    dir.join(".reel").display().to_string()
}

fn reel_at(dir: &Path, args: &[&str]) -> Run {
    let home = store_env(dir);
    reel_env(dir, args, &[("REEL_HOME", &home)])
}

fn example(name: &str) -> String {
    examples_dir().join(name).display().to_string()
}

#[test]
fn hello_runs_to_the_output_its_text_implies() {
    let dir = temp();
    let r = reel_at(
        dir.path(),
        &[
            "run",
            &example("hello.reel"),
            "--input",
            "name=Ada",
            "--input",
            "times=2",
        ],
    );
    assert_eq!(r.status, 0, "{r:?}");
    assert_eq!(
        json(&r),
        json!({ "greeting": "hello, Ada", "lines": ["HELLO, ADA #0", "HELLO, ADA #1"], "count": 2 })
    );
    assert!(r.stderr.contains("succeeded"), "{}", r.stderr);
}

#[test]
fn files_counts_words_and_writes_a_report() {
    let dir = temp();
    write(dir.path(), "a.txt", "one two three\n");
    write(dir.path(), "b.txt", "four five\n");
    let r = reel_at(
        dir.path(),
        &[
            "run",
            &example("files.reel"),
            "--input",
            r#"files=["a.txt","b.txt"]"#,
            "--json",
        ],
    );
    assert_eq!(r.status, 0, "{r:?}");
    let out = json(&r);
    assert_eq!(out["status"], "succeeded");
    assert_eq!(out["output"]["files"], 2);
    assert_eq!(out["output"]["report"], "3 a.txt\n2 b.txt\n");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("report.txt")).unwrap(),
        "3 a.txt\n2 b.txt\n"
    );
}

#[test]
fn tools_runs_user_tools_and_retries_the_flaky_one_with_one_key() {
    let dir = temp();
    let marker = format!("m{}", std::process::id());
    let r = reel_at(
        dir.path(),
        &[
            "run",
            &example("tools.reel"),
            "--input",
            &format!("marker={marker}"),
        ],
    );
    assert_eq!(r.status, 0, "{r:?}");
    let out = json(&r);
    assert_eq!(out["total_words"], 7);
    assert_eq!(
        out["attempts"], 3,
        "two failures and a success, all with the same key"
    );
    assert!(out["best"].as_f64().unwrap() > 0.0);
}

#[test]
fn http_reads_with_a_secret_and_doubles_the_items() {
    let dir = temp();
    let server = TestServer::start(Box::new(|_, _| {
        (
            200,
            r#"{"items": [{"name": "a", "value": 1}, {"name": "b", "value": 21}]}"#.to_string(),
        )
    }));
    let r = reel_env(
        dir.path(),
        &[
            "run",
            &example("http.reel"),
            "--input",
            &format!("base={}", server.base),
            "--json",
        ],
        &[
            ("REEL_HOME", &store_env(dir.path())),
            ("REEL_SECRET_API_TOKEN", "tok-123"),
        ],
    );
    assert_eq!(r.status, 0, "{r:?}");
    assert_eq!(
        json(&r)["output"],
        json!({ "status": 200, "doubled": [2, 42] })
    );
    let requests = server.requests();
    assert_eq!(requests[0].url, "/data.json");
    assert_eq!(requests[0].method, "GET");
    assert_eq!(requests[0].header("authorization"), Some("Bearer tok-123"));
}

#[test]
fn approval_parks_takes_a_signal_and_finishes() {
    let dir = temp();
    let r = reel_at(
        dir.path(),
        &[
            "run",
            &example("approval.reel"),
            "--input",
            "request=deploy",
            "--input",
            "cooldown=1s",
            "--json",
        ],
    );
    assert_eq!(r.status, 0, "{r:?}");
    let started = json(&r);
    assert_eq!(started["status"], "waiting");
    let id = started["run"].as_str().unwrap().to_string();

    let bad = reel_at(dir.path(), &["signal", &id, "approve", "{not json"]);
    assert_eq!(bad.status, 2, "{bad:?}");

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
    let runs = json(&reel_at(dir.path(), &["runs", "--json"]));
    assert_eq!(runs[0]["status"], "succeeded", "{runs}");
    let resumed = reel_at(dir.path(), &["resume", &id, "--json"]);
    assert_eq!(resumed.status, 0);
    let out = json(&resumed);
    assert_eq!(out["output"]["approved"], true);
    assert!(
        out["output"]["message"]
            .as_str()
            .unwrap()
            .starts_with("approved by ada at "),
        "{out}"
    );
    // The worker resumed it twice (signal, then timer) and never spun on it.
    let events = json(&reel_at(dir.path(), &["events", &id, "--json"]));
    let resumes = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "run_resumed")
        .count();
    assert!(
        resumes <= 3,
        "{resumes} resumes: the worker spun on a run that was not due"
    );
}

// edge: the test checks that a real 2 s sleep took real time.
#[allow(clippy::disallowed_methods)]
#[test]
fn a_sleep_parks_the_run_and_the_worker_finishes_it() {
    let dir = temp();
    write(
        dir.path(),
        "nap.reel",
        "flow nap {\n  step z = sleep { for: 2s }\n  output z.woke_at\n}\n",
    );
    let began = std::time::Instant::now();
    let r = reel_at(dir.path(), &["run", "nap.reel", "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert_eq!(json(&r)["status"], "waiting");
    assert!(
        began.elapsed() < std::time::Duration::from_secs(2),
        "reel run returned at once"
    );
    let w = reel_at(dir.path(), &["worker", "--until-idle", "--poll-ms", "50"]);
    assert_eq!(w.status, 0, "{w:?}");
    assert!(began.elapsed() >= std::time::Duration::from_secs(2));
    let runs = json(&reel_at(dir.path(), &["runs", "--json"]));
    assert_eq!(runs[0]["status"], "succeeded");
}

/// A wait that would end after the year 9999 wrapped around to a time long past: a sleep of
/// 106751991167d woke at once, "at 1970-01-01", and a signal with such a timeout timed out at
/// once. The sleep now fails saying so; the signal waits without a deadline, which is what a
/// deadline no clock reaches means. A long sleep within the year 9999 parks as any.
#[test]
fn a_wait_that_ends_after_the_year_9999_is_refused_or_has_no_deadline() {
    let dir = temp();
    write(
        dir.path(),
        "long.reel",
        "flow long {\n  input d: duration = 1s\n  step z = sleep { for: input.d }\n  output z.woke_at\n}\n",
    );
    for d in ["3000000d", "106751991167d", "200000000000d"] {
        let r = reel_at(
            dir.path(),
            &["run", "long.reel", "--input", &format!("d={d}")],
        );
        assert_eq!(r.status, 1, "{d}: {r:?}");
        assert!(
            r.stderr.contains("[tool.sleep.for] `for` is")
                && r.stderr.contains("later than any time Reel can keep"),
            "{d}: {}",
            r.stderr
        );
    }
    let r = reel_at(
        dir.path(),
        &["run", "long.reel", "--input", "d=2000000d", "--json"],
    );
    assert_eq!(r.status, 0, "{r:?}");
    assert_eq!(json(&r)["status"], "waiting");

    // In a store of its own: the sleeping run above waits for 5,476 years, and a worker
    // `--until-idle` would wait with it.
    let dir = temp();
    write(
        dir.path(),
        "sig.reel",
        "flow sig {\n  step go = signal {\n    name: \"go\"\n    timeout: 106751991100d\n  }\n  output go\n}\n",
    );
    let r = reel_at(dir.path(), &["run", "sig.reel", "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert_eq!(json(&r)["status"], "waiting", "{r:?}");
    let id = json(&r)["run"].as_str().unwrap().to_string();
    let s = reel_at(dir.path(), &["signal", &id, "go"]);
    assert_eq!(s.status, 0, "{s:?}");
    let w = reel_at(dir.path(), &["worker", "--until-idle", "--poll-ms", "50"]);
    assert_eq!(w.status, 0, "{w:?}");
    let runs = json(&reel_at(dir.path(), &["runs", "--json"]));
    assert_eq!(runs[0]["status"], "succeeded", "{runs}");
}

#[test]
fn bad_input_is_refused_before_anything_runs() {
    let dir = temp();
    write(
        dir.path(),
        "f.reel",
        "flow f {\n  input n: int\n  secret key\n  step s = http.get { url: \"http://127.0.0.1:9\", bearer: secret.key }\n  output input.n\n}\n",
    );
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "f.reel", "--input", "n=abc"],
            "must be of type `int`",
        ),
        (
            &["run", "f.reel", "--input", "n=1", "--input", "m=2"],
            "no input `m`",
        ),
        (&["run", "f.reel"], "is required"),
        (
            &["run", "f.reel", "--input", "n=1", "--keep-for", "a week"],
            "`a week` is not a duration for keeping runs",
        ),
        (
            &[
                "run",
                "f.reel",
                "--input",
                "n=1",
                "--keep-for",
                "213503982335d",
            ],
            "`213503982335d` is longer than Reel can count to keep runs for",
        ),
        (&["run", "f.reel", "--input", "n=1"], "REEL_SECRET_KEY"),
        (&["resume", "nosuchrun"], "no run"),
        (&["events", "nosuchrun"], "no run"),
        (&["signal", "nosuchrun", "x"], "no run"),
    ];
    for (args, says) in cases {
        let r = reel_at(dir.path(), args);
        assert_eq!(r.status, 2, "{args:?}: {r:?}");
        assert!(r.stderr.contains(says), "{args:?}: {}", r.stderr);
        // No run is named that was never recorded.
        assert!(!r.stderr.contains("of `f`"), "{args:?}: {}", r.stderr);
    }
    let runs = json(&reel_at(dir.path(), &["runs", "--json"]));
    assert_eq!(runs, json!([]), "nothing was recorded");
    // A run that is recorded is named first, before its steps, even when it then fails.
    let r = reel_env(
        dir.path(),
        &["run", "f.reel", "--input", "n=1"],
        &[("REEL_SECRET_KEY", "k")],
    );
    assert_eq!(r.status, 1, "{r:?}");
    let runs = json(&reel_at(dir.path(), &["runs", "--json"]));
    let id = runs[0]["run"].as_str().unwrap();
    let named = r.stderr.find(&format!("run {id} of `f`\n"));
    let step = r.stderr.find("✗ s");
    assert!(named.is_some() && named < step, "{}", r.stderr);
}

#[test]
fn a_failed_run_is_redriven_from_the_failed_step() {
    let dir = temp();
    write(
        dir.path(),
        "f.reel",
        "flow f {\n  step a = exec { cmd: [\"sh\", \"-c\", \"echo a >> calls.txt\"] }\n  step b = exec {\n    cmd: [\"sh\", \"-c\", \"echo b >> calls.txt; test -e ok\"]\n    after: [a]\n    retry: { max: 1 }\n  }\n  output 1\n}\n",
    );
    let r = reel_at(dir.path(), &["run", "f.reel", "--json"]);
    assert_eq!(r.status, 1, "{r:?}");
    let out = json(&r);
    assert_eq!(out["status"], "failed");
    assert_eq!(out["error"]["code"], "tool.exec.exit");
    assert_eq!(out["error"]["step"], "b");
    write(dir.path(), "ok", "");
    let id = out["run"].as_str().unwrap();
    let again = reel_at(dir.path(), &["resume", id, "--json"]);
    assert_eq!(again.status, 0, "{again:?}");
    assert_eq!(json(&again)["status"], "succeeded");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("calls.txt")).unwrap(),
        "a\nb\nb\n"
    );
}

#[test]
fn events_and_logs_show_the_journal_and_what_tools_printed() {
    let dir = temp();
    write(
        dir.path(),
        "f.reel",
        "flow f {\n  step a = exec { cmd: [\"sh\", \"-c\", \"echo to-stderr >&2; echo '{\\\"x\\\": 1}'\"] }\n  output a.json\n}\n",
    );
    let r = reel_at(dir.path(), &["run", "f.reel", "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    let id = json(&r)["run"].as_str().unwrap().to_string();
    let events = json(&reel_at(dir.path(), &["events", &id, "--json", "--full"]));
    let kinds: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "run_started",
            "step_started",
            "effect_recorded",
            "step_succeeded",
            "run_finished"
        ]
    );
    assert_eq!(
        events[3]["data"]["output"]["value"]["json"],
        json!({"x": 1})
    );
    // A short value, named by itself in the journal, is shown as a long one is: with its digest.
    assert_eq!(
        events[4]["data"]["output"],
        json!({
            "digest": reel_flowspec::canonical::digest_value(&json!({"x": 1})),
            "value": {"x": 1}
        })
    );
    let only_a = json(&reel_at(
        dir.path(),
        &["events", &id, "--json", "--step", "a"],
    ));
    assert_eq!(only_a.as_array().unwrap().len(), 3);
    let logs = reel_at(dir.path(), &["logs", &id]);
    assert!(logs.stdout.contains("a | to-stderr"), "{logs:?}");
    let text = reel_at(dir.path(), &["events", &id]);
    assert!(text.stdout.contains("effect_recorded"), "{text:?}");
}

#[test]
fn cancel_stops_a_waiting_run() {
    let dir = temp();
    write(
        dir.path(),
        "f.reel",
        "flow f {\n  step w = signal { name: \"go\" }\n  output w\n}\n",
    );
    let r = reel_at(dir.path(), &["run", "f.reel", "--json"]);
    let id = json(&r)["run"].as_str().unwrap().to_string();
    let c = reel_at(dir.path(), &["cancel", &id]);
    assert_eq!(c.status, 0, "{c:?}");
    let runs = json(&reel_at(dir.path(), &["runs", "--json"]));
    assert_eq!(runs[0]["status"], "canceled");
    let s = reel_at(dir.path(), &["signal", &id, "go"]);
    assert_eq!(s.status, 2, "a signal to an ended run is refused");
}

#[test]
fn a_signal_sent_early_is_kept_for_the_wait() {
    let dir = temp();
    write(
        dir.path(),
        "f.reel",
        "flow f {\n  step first = sleep { for: 1s }\n  step w = signal { name: \"go\", after: [first] }\n  output w\n}\n",
    );
    let r = reel_at(dir.path(), &["run", "f.reel", "--json"]);
    let id = json(&r)["run"].as_str().unwrap().to_string();
    let s = reel_at(dir.path(), &["signal", &id, "go", "42"]);
    assert_eq!(s.status, 0, "{s:?}");
    let w = reel_at(dir.path(), &["worker", "--until-idle", "--poll-ms", "50"]);
    assert_eq!(w.status, 0, "{w:?}");
    let out = json(&reel_at(dir.path(), &["resume", &id, "--json"]));
    assert_eq!(out["output"], json!(42));
}

#[test]
fn retried_effects_carry_one_key_and_runs_carry_different_keys() {
    let dir = temp();
    let server = TestServer::start(Box::new(|_, n| {
        if n % 3 < 2 {
            (503, "{}".into())
        } else {
            (200, r#"{"ok": true}"#.into())
        }
    }));
    let flow = format!(
        "flow f {{\n  step p = http.post {{\n    url: \"{}/hook\"\n    json: {{ a: 1 }}\n    retry: {{ max: 3, backoff: \"fixed\", base: 10ms, jitter: false }}\n  }}\n  output p.status\n}}\n",
        server.base
    );
    write(dir.path(), "f.reel", &flow);
    for _ in 0..2 {
        let r = reel_at(dir.path(), &["run", "f.reel"]);
        assert_eq!(r.status, 0, "{r:?}");
        assert_eq!(r.stdout.trim(), "200");
    }
    let keys: Vec<String> = server
        .requests()
        .iter()
        .map(|r| {
            r.header("idempotency-key")
                .expect("an effect carries a key")
                .to_string()
        })
        .collect();
    assert_eq!(keys.len(), 6);
    assert!(
        server
            .requests()
            .iter()
            .all(|r| r.method == "POST" && r.body == r#"{"a":1}"#)
    );
    assert!(keys[0..3].iter().all(|k| *k == keys[0]), "{keys:?}");
    assert!(keys[3..6].iter().all(|k| *k == keys[3]), "{keys:?}");
    assert_ne!(keys[0], keys[3]);
    assert_eq!(keys[0].len(), 64);
}

#[test]
fn a_secret_appears_nowhere_it_could_be_recorded() {
    let dir = temp();
    let secret = "s3cr3t-VALUE-do-not-store";
    // The server echoes the Authorization header back, and fails once with it in the body.
    let server = TestServer::start(Box::new(|r, n| {
        let auth = r.header("authorization").unwrap_or_default().to_string();
        if n == 0 {
            (500, json!({ "saw": auth }).to_string())
        } else {
            (200, json!({ "saw": auth }).to_string())
        }
    }));
    write(
        dir.path(),
        "leak.py",
        "import json, sys\nargs = json.load(sys.stdin)\nprint('token is', args['token'], file=sys.stderr)\nprint(json.dumps({'ok': True}))\n",
    );
    let flow = format!(
        "tool leak {{\n  kind: \"read\"\n  exec: [\"python3\", \"leak.py\"]\n  input {{ token: secret }}\n  output {{ ok: bool }}\n}}\n\nflow f {{\n  secret api\n  step g = http.get {{\n    url: \"{}/x\"\n    bearer: secret.api\n    retry: {{ max: 2, backoff: \"fixed\", base: 10ms, jitter: false }}\n  }}\n  step l = leak {{ token: secret.api }}\n  output {{ saw: g.body, ok: l.ok }}\n}}\n",
        server.base
    );
    write(dir.path(), "f.reel", &flow);
    let home = store_env(dir.path());
    let r = reel_env(
        dir.path(),
        &["run", "f.reel", "--json"],
        &[("REEL_HOME", &home), ("REEL_SECRET_API", secret)],
    );
    assert_eq!(r.status, 0, "{r:?}");
    assert!(
        !r.stdout.contains(secret) && !r.stderr.contains(secret),
        "{r:?}"
    );
    let id = json(&r)["run"].as_str().unwrap().to_string();
    assert_eq!(
        server.requests()[1].header("authorization"),
        Some(&*format!("Bearer {secret}"))
    );
    for args in [
        vec!["events", &id, "--full"],
        vec!["events", &id, "--full", "--json"],
        vec!["logs", &id],
    ] {
        let out = reel_at(dir.path(), &args);
        assert_eq!(out.status, 0);
        assert!(!out.stdout.contains(secret), "{args:?}: {}", out.stdout);
    }
    let logs = reel_at(dir.path(), &["logs", &id]);
    assert!(logs.stdout.contains("token is {secret:api}"), "{logs:?}");
    // Every byte the store holds: the database, its WAL, and the blobs.
    let mut stack = vec![dir.path().join(".reel")];
    while let Some(p) = stack.pop() {
        for e in std::fs::read_dir(&p).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                assert!(
                    !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                    "{} holds the secret",
                    path.display()
                );
            }
        }
    }
}

#[test]
fn a_missing_secret_at_resume_leaves_the_run_as_it_was() {
    let dir = temp();
    write(
        dir.path(),
        "f.reel",
        "flow f {\n  secret key\n  step w = signal { name: \"go\" }\n  step g = http.get { url: \"http://127.0.0.1:9\", bearer: secret.key, after: [w] }\n  output g.status\n}\n",
    );
    let home = store_env(dir.path());
    let r = reel_env(
        dir.path(),
        &["run", "f.reel", "--json"],
        &[("REEL_HOME", &home), ("REEL_SECRET_KEY", "k")],
    );
    let id = json(&r)["run"].as_str().unwrap().to_string();
    let again = reel_at(dir.path(), &["resume", &id]);
    assert_eq!(again.status, 2, "{again:?}");
    assert!(again.stderr.contains("REEL_SECRET_KEY"), "{}", again.stderr);
    let runs = json(&reel_at(dir.path(), &["runs", "--json"]));
    assert_eq!(runs[0]["status"], "waiting");
    let _ = Value::Null;
}

/// A payload longer than one command-line argument may be (128 KiB on Linux) comes on
/// standard input with `-`, is kept whole, and is what the run's wait returns; a payload on
/// standard input that is not JSON is refused, as on the command line.
#[test]
fn a_signal_payload_too_long_for_a_command_line_comes_on_standard_input() {
    let dir = temp();
    write(
        dir.path(),
        "f.reel",
        "flow f {\n  step w = signal { name: \"order\" }\n  output len(w.lines)\n}\n",
    );
    let r = reel_at(dir.path(), &["run", "f.reel", "--json"]);
    let id = json(&r)["run"].as_str().unwrap().to_string();
    let lines: Vec<String> = (0..20_000).map(|i| format!("line {i:05}")).collect();
    let payload = json!({ "lines": lines }).to_string();
    assert!(payload.len() > 200_000);
    let signal = |stdin: &str| {
        let mut command = reel(dir.path(), &["signal", &id, "order", "-"]);
        command.env("REEL_HOME", store_env(dir.path()));
        run_with_stdin(command, stdin)
    };
    let bad = signal("{not json");
    assert_eq!(bad.status, 2, "{bad:?}");
    assert!(
        bad.stderr
            .contains("the payload on standard input is not JSON"),
        "{bad:?}"
    );
    let sent = signal(&payload);
    assert_eq!(sent.status, 0, "{sent:?}");
    let out = json(&reel_at(dir.path(), &["resume", &id, "--json"]));
    assert_eq!(out["output"], json!(20_000), "{out}");
    let full = reel_at(dir.path(), &["events", &id, "--full", "--json"]);
    assert!(
        full.stdout.contains("line 19999"),
        "the payload is kept whole"
    );
}
