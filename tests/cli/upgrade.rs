//! A store written by an earlier reel, opened by this one: its journals name every value by
//! its digest, where this reel names a short value by itself (`=` and its JSON). The fixture
//! (`tests/fixtures/schema3-store`, made as its README says) holds two runs of
//! `upgrade.reel` recorded by reel at `5de2ea8` (schema version 3): one that waits for its
//! timer and for signal `go`, and one whose timer fired and that received `go` and succeeded.
//!
//! The promises: the store is migrated when first written; a replay of the old run reproduces
//! it, `--verify` included; a fork with the same flow reuses every call (counted in its
//! journal, whether it finished at once or parked on its timer and was resumed), so nothing the
//! old run did is done again; a fork with a corrected step reuses all but that step; the
//! waiting run wakes from its timer, takes its signal and finishes without making its earlier
//! calls again, its journal then naming values in both forms, and replays as recorded.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::*;

/// The run that waits for `go`.
const WAITING: &str = "01m91pk3n1n2xh5g1jhykte2d7";
/// The run that received `go` and succeeded.
const DONE: &str = "01m91pk3nskxq0w6fe4f3b355b";

/// A project holding a copy of the fixture's store and flow.
fn project() -> tempfile::TempDir {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/schema3-store");
    let dir = temp();
    std::fs::create_dir_all(dir.path().join(".reel")).unwrap();
    std::fs::copy(fixture.join("reel.db"), dir.path().join(".reel/reel.db")).unwrap();
    std::fs::copy(
        fixture.join("upgrade.reel"),
        dir.path().join("upgrade.reel"),
    )
    .unwrap();
    write(dir.path(), "reel.toml", "");
    dir
}

fn events(dir: &Path, run: &str) -> Vec<Value> {
    let r = reel_in(dir, &["events", run, "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    json(&r).as_array().expect("events").clone()
}

/// How many calls of `step` the journal started.
fn started(events: &[Value], step: &str) -> usize {
    events
        .iter()
        .filter(|e| e["kind"] == "step_started" && e["step"] == step)
        .count()
}

/// Forks the finished run with `flow` and drives the fork to its end; returns its last answer
/// (`--json`) and, from its journal, the calls it reused and those it made live. A fork sleeps
/// its `nap` of 1 ms again: when that timer is not due yet as the fork runs out of work, the
/// fork parks (`waiting`), and a resume once it is due finishes it, reusing what is left. The
/// fork's own counts cover one process, so they are read from its journal.
fn fork_to_end(dir: &Path, flow: &str) -> (Value, usize, usize) {
    let r = reel_in(dir, &["fork", DONE, "--flow", flow, "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    let mut fork = json(&r);
    let run = fork["run"].as_str().expect("the fork's id").to_string();
    if fork["status"] == "waiting" {
        std::thread::sleep(std::time::Duration::from_millis(10));
        let r = reel_in(dir, &["resume", &run, "--json"]);
        assert_eq!(r.status, 0, "{r:?}");
        fork = json(&r);
    }
    assert_eq!(fork["status"], "succeeded", "{fork}");
    let journal = events(dir, &run);
    let call = |e: &Value| (e["step"].clone(), e["index"].clone(), e["attempt"].clone());
    let reused: Vec<_> = journal
        .iter()
        .filter(|e| e["kind"] == "call_reused")
        .map(call)
        .collect();
    let live = journal
        .iter()
        .filter(|e| e["kind"] == "step_started" && !reused.contains(&call(e)))
        .count();
    (fork, reused.len(), live)
}

fn schema_version(dir: &Path) -> i64 {
    store_db(dir)
        .query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .unwrap()
}

#[test]
fn runs_recorded_before_short_values_were_named_by_themselves_replay_fork_and_resume() {
    let dir = project();
    let d = dir.path();
    assert_eq!(schema_version(d), 3);
    let old = events(d, DONE);
    assert!(
        old.iter().all(|e| !e["data"].to_string().contains("\"=")),
        "the fixture names every value by its digest: {old:?}"
    );

    // A replay reads the old store as it is, and reproduces the record, verified.
    let r = reel_in(d, &["replay", DONE, "--verify"]);
    assert_eq!(r.status, 0, "{r:?}");
    let recorded = json!({
        "note": "charged ada",
        "ship": { "customer": "ada", "go": "now" },
        "woke": true
    });
    assert_eq!(serde_json::from_str::<Value>(&r.stdout).unwrap(), recorded);

    // A fork with the same flow compares what it computes now with what the old run recorded
    // (names in two forms) and finds every call the same: nothing is done again.
    let (fork, reused, live) = fork_to_end(d, "upgrade.reel");
    assert_eq!((live, reused), (0, 4));
    assert_eq!(fork["output"], recorded);
    assert_eq!(schema_version(d), 7, "migrated by the first write");

    // A corrected step runs live; the steps before it are reused.
    let fixed = std::fs::read_to_string(d.join("upgrade.reel"))
        .unwrap()
        .replace("go: go }", "go: go, fixed: true }");
    write(d, "fixed.reel", &fixed);
    let (fork, reused, live) = fork_to_end(d, "fixed.reel");
    assert_eq!((live, reused), (1, 3));
    assert_eq!(fork["output"]["ship"]["fixed"], true);

    // The waiting run takes its signal and goes on from where the old reel left it.
    let r = reel_in(d, &["signal", WAITING, "go", "\"later\""]);
    assert_eq!(r.status, 0, "{r:?}");
    let r = reel_in(d, &["resume", WAITING, "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    let done = json(&r);
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(
        done["output"],
        json!({
            "note": "charged ada",
            "ship": { "customer": "ada", "go": "later" },
            "woke": true
        })
    );
    let journal = events(d, WAITING);
    for step in ["charge", "note", "ship"] {
        assert_eq!(started(&journal, step), 1, "{step}: {journal:?}");
    }
    // Its later events name the short values by themselves.
    let ship = journal
        .iter()
        .find(|e| e["kind"] == "step_started" && e["step"] == "ship")
        .unwrap();
    assert_eq!(
        ship["data"]["inputs"],
        r#"={"value":{"customer":"ada","go":"later"}}"#
    );
    let r = reel_in(d, &["replay", WAITING, "--verify"]);
    assert_eq!(r.status, 0, "{r:?}");
}
