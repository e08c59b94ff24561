//! A journal row that cannot be read is a hole: `reel events` shows the other rows and marks
//! it, `reel runs` counts it (an ended run's with `--check`), `reel resume` refuses the run
//! naming the row, and `reel worker` leaves the run as it was.

use std::path::Path;

use serde_json::Value;

use crate::support::*;

/// A flow that parks on a signal: its journal is `run_started`, `signal_awaited`, `run_waiting`.
const PARKED: &str =
    "flow parked {\n  step go = signal { name: \"go\", timeout: 1d }\n  output go\n}\n";

/// A run of `parked.reel` in `dir`, waiting: its journal is `run_started`, `signal_awaited`,
/// `run_waiting`.
fn parked_run(dir: &Path) -> String {
    write(dir, "reel.toml", "");
    write(dir, "parked.reel", PARKED);
    let r = reel_in(dir, &["run", "parked.reel", "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    json(&r)["run"].as_str().unwrap().to_string()
}

/// A waiting run whose journal row 1 holds bytes that are not text.
fn waiting_run_with_a_hole(dir: &Path) -> String {
    let id = parked_run(dir);
    damage_journal_row(dir, &id, 1);
    id
}

fn status_and_holes(dir: &Path, id: &str) -> (String, Value) {
    let r = reel_in(dir, &["runs", "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    let runs = json(&r);
    let run = runs
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run"] == id)
        .unwrap();
    (
        run["status"].as_str().unwrap().to_string(),
        run["holes"].clone(),
    )
}

/// The note `reel runs` writes after its table for run `id` with one hole.
fn one_hole_noted(id: &str) -> String {
    format!("note: run {id} has 1 unreadable journal row (holes)")
}

#[test]
fn a_hole_is_shown_counted_and_refused() {
    let dir = temp();
    let d = dir.path();
    let id = waiting_run_with_a_hole(d);

    // `reel events`: the other rows, and a marker where the hole is.
    let r = reel_in(d, &["events", &id]);
    assert_eq!(r.status, 0, "{r:?}");
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", r.stdout);
    assert!(lines[0].contains("run_started"), "{}", r.stdout);
    assert!(
        lines[1].starts_with("    1  <hole: this row cannot be read:"),
        "{}",
        r.stdout
    );
    assert!(lines[2].contains("run_waiting"), "{}", r.stdout);
    assert!(
        r.stderr
            .contains(&format!("run {id} has 1 unreadable journal row")),
        "{}",
        r.stderr
    );
    let r = reel_in(d, &["events", &id, "--json"]);
    let events = json(&r);
    assert_eq!(events[1]["seq"], 1);
    assert!(events[1]["hole"].is_string(), "{events}");
    assert_eq!(events[2]["kind"], "run_waiting");

    // `reel runs`: a note, and the count in `--json`.
    assert_eq!(status_and_holes(d, &id), ("waiting".to_string(), 1.into()));
    let r = reel_in(d, &["runs"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert!(r.stderr.contains(&one_hole_noted(&id)), "{}", r.stderr);

    // `reel resume` refuses, naming the run and the row; the run stays as it was.
    let r = reel_in(d, &["resume", &id]);
    assert_ne!(r.status, 0, "{r:?}");
    assert!(
        r.stderr
            .contains(&format!("run {id} has an unreadable journal row at 1")),
        "{}",
        r.stderr
    );
    assert_eq!(status_and_holes(d, &id), ("waiting".to_string(), 1.into()));
}

#[test]
fn the_worker_leaves_a_run_with_a_hole_waiting_and_names_it() {
    let dir = temp();
    let d = dir.path();
    let id = waiting_run_with_a_hole(d);
    // The signal makes the run due.
    let r = reel_in(d, &["signal", &id, "go"]);
    assert_eq!(r.status, 0, "{r:?}");
    let r = reel_in(d, &["worker", "--until-idle", "--poll-ms", "20"]);
    assert_eq!(r.status, 1, "{r:?}");
    assert!(r.stderr.contains(&id), "{}", r.stderr);
    assert!(
        r.stderr.contains("unreadable journal row at 1"),
        "{}",
        r.stderr
    );
    assert_eq!(status_and_holes(d, &id), ("waiting".to_string(), 1.into()));
}

/// A listing reads the journal of a run that has not ended (it may be resumed); an ended
/// run's only with `--check`, so that `reel runs` costs the runs it lists, not their events.
#[test]
fn an_ended_runs_holes_are_counted_when_checked() {
    let dir = temp();
    let d = dir.path();
    write(d, "reel.toml", "");
    write(
        d,
        "done.reel",
        "flow done {\n  step a = echo { value: 1 }\n  output a\n}\n",
    );
    let r = reel_in(d, &["run", "done.reel", "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    let id = json(&r)["run"].as_str().unwrap().to_string();
    damage_journal_row(d, &id, 1);

    let r = reel_in(d, &["runs", "--json"]);
    assert_eq!(json(&r)[0]["holes"], Value::Null, "not read: {}", r.stdout);
    let r = reel_in(d, &["runs"]);
    assert!(!r.stderr.contains("unreadable"), "{}", r.stderr);

    let r = reel_in(d, &["runs", "--json", "--check"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert_eq!(json(&r)[0]["status"], "succeeded");
    assert_eq!(json(&r)[0]["holes"], 1);
    let r = reel_in(d, &["runs", "--check"]);
    assert!(r.stderr.contains(&one_hole_noted(&id)), "{}", r.stderr);
}

/// A run's row that claims far more events than its journal holds (a damaged count) is
/// refused by a replay naming the first missing row, without taking memory for the count.
#[test]
fn a_replay_of_a_run_claiming_more_events_than_it_has_names_the_first_missing_row() {
    let dir = temp();
    let d = dir.path();
    let id = parked_run(d);
    let changed = store_db(d)
        .execute(
            "UPDATE runs SET next_seq = 9000000000000000000 WHERE id = ?1",
            [&id],
        )
        .unwrap();
    assert_eq!(changed, 1);
    let r = reel_in(d, &["replay", &id]);
    assert_ne!(r.status, 0, "{r:?}");
    assert!(
        r.stderr
            .contains(&format!("run {id} has an unreadable journal row at 3")),
        "{}",
        r.stderr
    );
}
