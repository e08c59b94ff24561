//! `reel clean`: ended runs past their keep time go with the values only they used; runs that
//! have not ended never go.

use std::path::Path;

use reel_flowspec::canonical::digest_value;
use serde_json::{Value, json};

use crate::support::*;

/// A flow whose output is its input: runs with the same input share their values.
const ECHO: &str = "flow echo {\n  input name: string\n  output \"hello, ${input.name}\"\n}\n";

/// An input long enough that the run's inputs and output are kept by digest, each a row a
/// clean removes (a short value is its own name and has no row).
fn long(name: &str) -> String {
    format!("{name}-{}", "n".repeat(64))
}

/// A flow that parks on a signal.
const PARKED: &str =
    "flow parked {\n  step go = signal { name: \"go\", timeout: 1d }\n  output go\n}\n";

fn started(dir: &Path, args: &[&str]) -> String {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.push("--json");
    let r = reel_in(dir, &all);
    assert_eq!(r.status, 0, "{r:?}");
    json(&r)["run"].as_str().unwrap().to_string()
}

fn run_ids(dir: &Path) -> Vec<String> {
    let r = reel_in(dir, &["runs", "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    let mut ids: Vec<String> = json(&r)
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

/// Whether the store holds the value.
fn stored(dir: &Path, value: &Value) -> bool {
    store_db(dir)
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM vals WHERE digest = ?1)",
            [digest_value(value)],
            |r| r.get(0),
        )
        .unwrap()
}

fn clean(dir: &Path, args: &[&str]) -> Value {
    let mut all = vec!["clean"];
    all.extend_from_slice(args);
    all.push("--json");
    let r = reel_in(dir, &all);
    assert_eq!(r.status, 0, "{r:?}");
    json(&r)
}

#[test]
fn clean_removes_expired_ended_runs_and_what_only_they_used() {
    let dir = temp();
    let d = dir.path();
    write(d, "reel.toml", "");
    write(d, "echo.reel", ECHO);
    write(d, "parked.reel", PARKED);
    // Expired at once: one with a value of its own, one sharing a value with a kept run.
    let gone = started(
        d,
        &[
            "echo.reel",
            "--input",
            &format!("name={}", long("gone")),
            "--keep-for",
            "1ms",
        ],
    );
    let shared_gone = started(
        d,
        &[
            "echo.reel",
            "--input",
            &format!("name={}", long("both")),
            "--keep-for",
            "1ms",
        ],
    );
    // Kept for the week's default.
    let kept = started(
        d,
        &["echo.reel", "--input", &format!("name={}", long("both"))],
    );
    // Waiting, and expired if it had ended: never removed.
    let waiting = started(d, &["parked.reel", "--keep-for", "1ms"]);
    std::thread::sleep(std::time::Duration::from_millis(5));
    let all = {
        let mut v = vec![
            gone.clone(),
            shared_gone.clone(),
            kept.clone(),
            waiting.clone(),
        ];
        v.sort();
        v
    };
    assert!(stored(d, &json!(format!("hello, {}", long("gone")))));

    // A dry run says what would go and removes nothing.
    let dry = clean(d, &["--dry-run"]);
    let mut expired = vec![gone.clone(), shared_gone.clone()];
    expired.sort();
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["runs"], json!(expired));
    // Each echo run's own values: its inputs and its output.
    assert_eq!(dry["values"], 2, "{dry}");
    assert_eq!(run_ids(d), all);
    assert!(stored(d, &json!(format!("hello, {}", long("gone")))));

    let done = clean(d, &[]);
    assert_eq!(
        Value::Object(
            done.as_object()
                .unwrap()
                .iter()
                .filter(|(k, _)| !["dry_run", "vacuumed", "runs_read"].contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        ),
        Value::Object(
            dry.as_object()
                .unwrap()
                .iter()
                .filter(|(k, _)| !["dry_run", "vacuumed", "runs_read"].contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        )
    );
    // The dry run read the two runs that stay (the waiting one, and the ended one no clean
    // had read); the clean after it read only the waiting one: what the ended one references
    // was kept by the dry run.
    assert_eq!(
        (&dry["runs_read"], &done["runs_read"]),
        (&json!(2), &json!(1))
    );
    let mut left = vec![kept.clone(), waiting.clone()];
    left.sort();
    assert_eq!(run_ids(d), left);
    assert!(!stored(d, &json!(format!("hello, {}", long("gone")))));
    assert!(!stored(d, &json!({ "name": long("gone") })));
    // Shared with the kept run: stays, and the kept run still reads it.
    assert!(stored(d, &json!(format!("hello, {}", long("both")))));
    let r = reel_in(d, &["resume", &kept, "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert_eq!(json(&r)["output"], format!("hello, {}", long("both")));

    // A run that has not ended is refused by name.
    let r = reel_in(d, &["clean", &waiting]);
    assert_eq!(r.status, 2, "{r:?}");
    assert!(
        r.stderr
            .contains(&format!("run {waiting} is waiting, not ended")),
        "{}",
        r.stderr
    );

    // --all takes every ended run, whatever its keep time, and still not the waiting one.
    let everything = clean(d, &["--all"]);
    assert_eq!(everything["runs"], json!([kept]));
    assert_eq!(run_ids(d), vec![waiting.clone()]);
    assert!(!stored(d, &json!(format!("hello, {}", long("both")))));
    let r = reel_in(d, &["events", &waiting]);
    assert_eq!(r.status, 0, "{r:?}");

    // Nothing more to do, said in words.
    let r = reel_in(d, &["clean"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert!(
        r.stderr.contains("no ended run is due for removal"),
        "{}",
        r.stderr
    );
}

#[test]
fn clean_one_run_by_prefix_and_in_words() {
    let dir = temp();
    let d = dir.path();
    write(d, "reel.toml", "");
    write(d, "echo.reel", ECHO);
    let id = started(
        d,
        &["echo.reel", "--input", &format!("name={}", long("one"))],
    );
    let r = reel_in(d, &["clean", &id[..20], "--dry-run"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert!(
        r.stderr.contains(&format!("would remove run {id}")),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("would remove 1 run (2 events), 2 values (0 blob files), 1 FlowSpec"),
        "{}",
        r.stderr
    );
    assert_eq!(run_ids(d), vec![id.clone()]);
    let r = reel_in(d, &["clean", &id]);
    assert_eq!(r.status, 0, "{r:?}");
    assert!(
        r.stderr.contains(&format!("removed run {id}")),
        "{}",
        r.stderr
    );
    assert!(run_ids(d).is_empty());
    let r = reel_in(d, &["clean", "--all", &id]);
    assert_eq!(r.status, 2, "{r:?}");
}
