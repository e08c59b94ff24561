//! `reel cassette` and `reel test`: real runs of every example exported and tested, hand-written
//! cassettes in virtual time, readable failures, the format's schema, and no secret in a file.

use std::fs;
use std::path::Path;
use std::time::Instant;

use serde_json::Value;

use crate::support::*;

fn reel_at(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let home = dir.join(".reel").display().to_string();
    let mut all = vec![("REEL_HOME", home.as_str())];
    all.extend_from_slice(env);
    reel_env(dir, args, &all)
}

/// The secret the HTTP example is given; no cassette may hold it.
const TOKEN: &str = "tok-7f3a9c1e-never-in-a-cassette";

/// The schema in docs/, against which every exported cassette is checked.
fn schema() -> jsonschema::Validator {
    let text = fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/cassette.schema.json"
    ))
    .expect("docs/cassette.schema.json is readable");
    jsonschema::validator_for(&serde_json::from_str(&text).unwrap()).expect("a valid schema")
}

/// Runs example `name` live in `dir` as its text asks (inputs, a local server, a signal and a
/// worker), exports the run as `NAME.cassette.json` in `dir`, and returns the cassette's text.
fn record_example(dir: &Path, name: &str, server: &TestServer) -> String {
    let file = examples_dir().join(name).display().to_string();
    let base = format!("base={}", server.base);
    let inputs: Vec<&str> = match name {
        "hello.reel" => vec!["--input", "name=Ada", "--input", "times=2"],
        "files.reel" => vec!["--input", r#"files=["a.txt", "b.txt"]"#],
        "http.reel" => vec!["--input", &base],
        "approval.reel" => vec!["--input", "request=deploy", "--input", "cooldown=1s"],
        _ => vec![],
    };
    let mut args = vec!["run", file.as_str(), "--json"];
    args.extend(inputs);
    let r = reel_at(dir, &args, &[("REEL_SECRET_API_TOKEN", TOKEN)]);
    let id = json(&r)["run"].as_str().expect("a run id").to_string();
    if name == "approval.reel" {
        assert_eq!(json(&r)["status"], "waiting", "{r:?}");
        let s = reel_at(
            dir,
            &[
                "signal",
                &id,
                "approve",
                r#"{"approved": true, "by": "ada"}"#,
            ],
            &[],
        );
        assert_eq!(s.status, 0, "{s:?}");
        let w = reel_at(dir, &["worker", "--until-idle", "--poll-ms", "50"], &[]);
        assert_eq!(w.status, 0, "{w:?}");
    } else {
        assert_eq!(json(&r)["status"], "succeeded", "{name}: {r:?}");
    }
    let out = format!("{}.cassette.json", name.trim_end_matches(".reel"));
    let e = reel_at(dir, &["cassette", &id, "-o", &out], &[]);
    assert_eq!(e.status, 0, "{e:?}");
    assert!(e.stderr.contains(&format!("wrote {out}")), "{e:?}");
    fs::read_to_string(dir.join(&out)).unwrap()
}

#[test]
fn every_example_passes_against_the_cassette_of_its_own_run() {
    let dir = temp();
    write(dir.path(), "a.txt", "one two three\n");
    write(dir.path(), "b.txt", "four five\n");
    let server = TestServer::start(Box::new(|_, _| {
        (
            200,
            r#"{"items": [{"name": "a", "value": 1}, {"name": "b", "value": 2}]}"#.into(),
        )
    }));
    let validator = schema();
    let mut names = Vec::new();
    for example in examples() {
        let name = example.file_name().unwrap().to_string_lossy().to_string();
        let text = record_example(dir.path(), &name, &server);
        // Readable, valid against the published schema, and free of the secret.
        let value: Value = serde_json::from_str(&text).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{name}: {errors:?}\n{text}");
        assert!(!text.contains(TOKEN), "{name} holds the secret:\n{text}");
        names.push(name);
    }
    assert!(names.len() >= 5, "{names:?}");
    // The HTTP call's inputs show where the secret went, never its value.
    let http = fs::read_to_string(dir.path().join("http.cassette.json")).unwrap();
    assert!(http.contains("{secret:api_token}"), "{http}");

    // The server is gone and no tool may run: every cassette passes in virtual time.
    drop(server);
    let t = reel_at(dir.path(), &["test", "--json"], &[("PATH", "/nonexistent")]);
    assert_eq!(t.status, 0, "{t:?}");
    let report = json(&t);
    assert_eq!(report["failed"], 0, "{report:#}");
    assert_eq!(report["passed"], names.len(), "{report:#}");
    for c in report["cassettes"].as_array().unwrap() {
        assert_eq!(c["passed"], true, "{c:#}");
        assert!(
            c["calls"].as_u64().unwrap() > 0,
            "every example calls a tool: {c:#}"
        );
    }

    // Re-exporting the same run gives the same file (stable order and keys).
    let again = reel_at(dir.path(), &["runs", "--json"], &[]);
    let runs = json(&again);
    let first = runs
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["flow"] == "hello")
        .unwrap();
    let id = first["run"].as_str().unwrap();
    let e = reel_at(dir.path(), &["cassette", id], &[]);
    assert_eq!(
        e.stdout,
        fs::read_to_string(dir.path().join("hello.cassette.json")).unwrap()
    );
}

/// A flow that waits for approval, then sleeps ten days.
const NAP: &str = "/// Waits for approval, then sleeps ten days before it writes a note.\nflow nap {\n  input who: string = \"Ada\"\n\n  step approval = signal {\n    name: \"approve\"\n    timeout: 30d\n  }\n\n  step rest = sleep {\n    for: 10d\n    after: [approval]\n  }\n\n  step note = echo {\n    value: { to: input.who, approved: approval.ok, woke_at: rest.woke_at }\n  }\n\n  output note\n}\n";

/// Its cassette, written by hand.
const NAP_CASSETTE: &str = r#"{
  "cassette": 1,
  "flow": "nap",
  "source": "nap.reel",
  "started_at": "2026-01-01T00:00:00Z",
  "inputs": { "who": "Ada" },
  "signals": [
    { "step": "approval", "name": "approve", "at": "2026-01-02T09:00:00Z", "payload": { "ok": true } }
  ],
  "timers": [ { "step": "rest", "until": "2026-01-12T09:00:00Z" } ],
  "calls": [
    {
      "step": "note",
      "inputs": { "value": { "to": "Ada", "approved": true, "woke_at": "2026-01-12T09:00:00Z" } },
      "result": { "to": "Ada", "approved": true, "woke_at": "2026-01-12T09:00:00Z" }
    }
  ],
  "status": "succeeded",
  "output": { "to": "Ada", "approved": true, "woke_at": "2026-01-12T09:00:00Z" }
}
"#;

#[test]
// edge: the test measures that ten days of virtual time take no real time.
#[allow(clippy::disallowed_methods)]
fn a_ten_day_sleep_tests_at_once_from_a_hand_written_cassette() {
    let dir = temp();
    write(dir.path(), "flows/nap.reel", NAP);
    write(dir.path(), "flows/nap.cassette.json", NAP_CASSETTE);
    let began = Instant::now();
    let t = reel_at(dir.path(), &["test"], &[]);
    let took = began.elapsed();
    assert_eq!(t.status, 0, "{t:?}");
    assert_eq!(
        t.stdout,
        "test flows/nap.cassette.json ... ok\n\n1 passed, 0 failed\n"
    );
    // Virtual time: nothing waits ten days, or a second.
    assert!(took.as_secs() < 5, "took {took:?}");
    assert!(schema().is_valid(&serde_json::from_str(NAP_CASSETTE).unwrap()));
}

#[test]
fn an_edited_flow_fails_with_the_step_its_line_and_a_diff() {
    let dir = temp();
    write(
        dir.path(),
        "nap.reel",
        &NAP.replace("to: input.who", "to: upper(input.who)"),
    );
    write(dir.path(), "nap.cassette.json", NAP_CASSETTE);
    let t = reel_at(dir.path(), &["test"], &[]);
    assert_eq!(t.status, 1, "{t:?}");
    insta::assert_snapshot!("test_edited_flow", t.stdout);
}

#[test]
fn a_changed_output_fails_with_a_diff_of_the_values() {
    let dir = temp();
    write(
        dir.path(),
        "nap.reel",
        &NAP.replace("output note", "output { note: note }"),
    );
    write(dir.path(), "nap.cassette.json", NAP_CASSETTE);
    let t = reel_at(dir.path(), &["test"], &[]);
    assert_eq!(t.status, 1, "{t:?}");
    insta::assert_snapshot!("test_changed_output", t.stdout);
}

#[test]
fn a_call_the_cassette_lacks_and_a_call_never_made_are_named() {
    let dir = temp();
    write(dir.path(), "nap.reel", NAP);
    let mut lacking: Value = serde_json::from_str(NAP_CASSETTE).unwrap();
    lacking["calls"] = Value::Array(Vec::new());
    write(dir.path(), "lacking.cassette.json", &lacking.to_string());
    let mut extra: Value = serde_json::from_str(NAP_CASSETTE).unwrap();
    extra["calls"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "step": "audit", "tool": "echo", "inputs": { "value": 1 }, "result": 1
        }));
    write(dir.path(), "extra.cassette.json", &extra.to_string());
    let t = reel_at(dir.path(), &["test", "--json"], &[]);
    assert_eq!(t.status, 1, "{t:?}");
    let report = json(&t);
    assert_eq!(
        (report["passed"].clone(), report["failed"].clone()),
        (0.into(), 2.into())
    );
    let by = |name: &str| {
        report["cassettes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["cassette"] == name)
            .unwrap()["divergence"]
            .clone()
    };
    let lack = by("lacking.cassette.json");
    assert_eq!(lack["step"], "note");
    assert_eq!(lack["source"]["line"], 15, "{lack:#}");
    assert!(
        lack["what"].as_str().unwrap().contains("does not hold"),
        "{lack:#}"
    );
    assert_eq!(
        lack["replayed"]["value"]["to"], "Ada",
        "its inputs are shown: {lack:#}"
    );
    let never = by("extra.cassette.json");
    assert_eq!(never["step"], "audit");
    assert!(
        never["what"].as_str().unwrap().contains("never makes"),
        "{never:#}"
    );
}

#[test]
fn a_changed_builtin_fails_a_cassette_that_depends_on_it() {
    let dir = temp();
    write(
        dir.path(),
        "nap.reel",
        &NAP.replace("to: input.who", "to: upper(input.who)"),
    );
    let upper = NAP_CASSETTE.replace("\"to\": \"Ada\"", "\"to\": \"ADA\"");
    write(dir.path(), "nap.cassette.json", &upper);
    let t = reel_at(dir.path(), &["test"], &[]);
    assert_eq!(t.status, 0, "{t:?}");
    let t = reel_at(
        dir.path(),
        &["test"],
        &[("REEL_TEST_FAULT", "builtin:upper")],
    );
    assert_eq!(t.status, 1, "{t:?}");
    assert!(t.stdout.contains("at step `note`"), "{t:?}");
}

#[test]
fn bad_cassettes_and_paths_get_errors_that_say_what_to_fix() {
    let dir = temp();
    let none = reel_at(dir.path(), &["test"], &[]);
    assert_eq!(none.status, 2, "{none:?}");
    assert!(none.stderr.contains("reel cassette RUN -o"), "{none:?}");

    write(dir.path(), "nap.reel", NAP);
    write(dir.path(), "junk.cassette.json", "{ not json");
    write(
        dir.path(),
        "future.cassette.json",
        &NAP_CASSETTE.replace("\"cassette\": 1", "\"cassette\": 9"),
    );
    write(
        dir.path(),
        "nosource.cassette.json",
        &NAP_CASSETTE.replace("\"source\": \"nap.reel\",", ""),
    );
    write(
        dir.path(),
        "badtime.cassette.json",
        &NAP_CASSETTE.replace("2026-01-01T00:00:00Z", "new year"),
    );
    let t = reel_at(dir.path(), &["test"], &[]);
    assert_eq!(t.status, 1, "{t:?}");
    insta::assert_snapshot!("test_bad_cassettes", t.stdout);
}

#[test]
fn update_records_a_cassette_again_from_a_live_run() {
    let dir = temp();
    let flow = "flow twice {\n  input n: int = 2\n  step doubled = echo {\n    value: input.n * 2\n  }\n  output doubled\n}\n";
    write(dir.path(), "twice.reel", flow);
    let r = reel_at(dir.path(), &["run", "twice.reel", "--json"], &[]);
    let id = json(&r)["run"].as_str().unwrap().to_string();
    let e = reel_at(
        dir.path(),
        &["cassette", &id, "-o", "twice.cassette.json"],
        &[],
    );
    assert_eq!(e.status, 0, "{e:?}");
    // A deliberate change: the test fails, --update records it again, and it passes.
    write(
        dir.path(),
        "twice.reel",
        &flow.replace("input.n * 2", "input.n * 3"),
    );
    assert_eq!(reel_at(dir.path(), &["test"], &[]).status, 1);
    let u = reel_at(dir.path(), &["test", "--update"], &[]);
    assert_eq!(u.status, 0, "{u:?}");
    assert!(
        u.stdout.contains("test twice.cassette.json ... updated"),
        "{u:?}"
    );
    let t = reel_at(dir.path(), &["test"], &[]);
    assert_eq!(t.status, 0, "{t:?}");
    let text = fs::read_to_string(dir.path().join("twice.cassette.json")).unwrap();
    let c: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(c["output"], 6);
    assert_eq!(c["source"], "twice.reel");
}

#[test]
// edge: REEL_BLESS asks the test to rewrite the file it checks.
#[allow(clippy::disallowed_methods)]
fn the_published_schema_is_the_one_the_format_has() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cassette.schema.json");
    let want = format!(
        "{}\n",
        serde_json::to_string_pretty(&reel_journal::cassette::Cassette::schema()).unwrap()
    );
    if std::env::var_os("REEL_BLESS").is_some() {
        fs::write(path, &want).unwrap();
    }
    let have = fs::read_to_string(path).unwrap_or_default();
    assert!(
        have == want,
        "docs/cassette.schema.json is stale: run `REEL_BLESS=1 cargo test --test cli cassette` and commit it"
    );
}

/// The corpus of recorded runs (`tests/corpus`, recorded by its `record.sh`).
fn corpus() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus").to_string()
}

#[test]
fn the_corpus_of_recorded_runs_replays_on_this_engine() {
    let dir = temp();
    let t = reel_at(dir.path(), &["test", &corpus(), "--json"], &[]);
    assert_eq!(t.status, 0, "{t:?}");
    let report = json(&t);
    let cassettes = report["cassettes"].as_array().unwrap();
    assert!(cassettes.len() >= 9, "{report:#}");
    assert!(cassettes.iter().all(|c| c["passed"] == true), "{report:#}");
    // Every cassette was recorded by this epoch: raising it means recording them again.
    for entry in fs::read_dir(corpus()).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().ends_with(".cassette.json") {
            let c: Value = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
            assert_eq!(
                c["epoch"],
                reel_journal::journal::DETERMINISM_EPOCH,
                "{} was recorded by another epoch: run tests/corpus/record.sh",
                path.display()
            );
        }
    }
}

#[test]
fn a_changed_builtin_fails_the_corpus() {
    let dir = temp();
    let t = reel_at(
        dir.path(),
        &["test", &corpus(), "--json"],
        &[("REEL_TEST_FAULT", "builtin:upper")],
    );
    assert_eq!(t.status, 1, "{t:?}");
    let report = json(&t);
    let failed: Vec<&str> = report["cassettes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["passed"] == false)
        .map(|c| c["cassette"].as_str().unwrap())
        .collect();
    assert_eq!(failed.len(), 1, "{report:#}");
    assert!(
        failed[0].ends_with("example-hello.cassette.json"),
        "{failed:?}"
    );
}
