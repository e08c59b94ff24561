//! Tests of `Store::clean`: which runs go, which values, blobs and FlowSpecs go with them, and
//! what the database file does afterwards.

use std::collections::BTreeSet;

use rusqlite::Connection;
use serde_json::{Value, json};
use tempfile::TempDir;

use super::*;
use crate::api::{RunStatus, RunUpdate};
use crate::clock::ManualClock;

/// The time the tests' clock stands at.
const T0: i64 = 1_700_000_000_000;
const HOUR: i64 = 3_600_000;

/// One run of a test store: how it stands and what it references.
struct Given {
    id: &'static str,
    status: RunStatus,
    /// Hours before [`T0`] it ended (ended runs only).
    ended_hours_ago: i64,
    /// Its keep time in hours; `None` is a run row without one (the week's default).
    keep_hours: Option<i64>,
    /// The values its journal names.
    values: &'static [&'static str],
    /// Its FlowSpec.
    spec: &'static str,
}

/// A value the tests refer to by name; `big` is stored as a blob file. Each is longer than a
/// value named by itself (`canonical::LITERAL_MAX`), so each has a row of its own to clean.
fn value(name: &str) -> Value {
    match name {
        "big" => json!({ "big": "x".repeat(100 * 1024) }),
        other => json!({ "v": other, "pad": "p".repeat(64) }),
    }
}

fn spec_digest(name: &str) -> String {
    reel_flowspec::canonical::sha256_hex(name.as_bytes())
}

fn build(given: &[Given]) -> (TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store =
        SqliteStore::open(&dir.path().join(".reel"), Arc::new(ManualClock::at(T0))).unwrap();
    for g in given {
        store
            .put_spec(
                &spec_digest(g.spec),
                &format!("{{\"spec\":\"{}\"}}", g.spec),
            )
            .unwrap();
        let run = NewRun {
            first_events: Vec::new(),
            id: g.id.to_string(),
            flow: "f".to_string(),
            flow_digest: spec_digest(g.spec),
            source: None,
            source_abs: None,
            cwd: "/".to_string(),
            parent: None,
            keep_for_ms: g.keep_hours.map(|h| u64::try_from(h * HOUR).unwrap()),
            durability: Durability::Fast,
            created_at: T0 - 100 * 24 * HOUR,
            kept: Vec::new(),
        };
        let lease = store
            .create_run(run, &Owner::this_process(), 60_000)
            .unwrap();
        let events = g
            .values
            .iter()
            .map(|name| NewEvent {
                at: T0,
                kind: "call_succeeded".to_string(),
                step: Some("s".to_string()),
                index: None,
                attempt: Some(1),
                data: json!({ "output": store.put_value(&value(name)).unwrap() }),
            })
            .collect();
        store.append(&lease, events).unwrap();
        let ended = g.status.is_ended().then_some(T0 - g.ended_hours_ago * HOUR);
        store
            .update_run(
                &lease,
                RunUpdate {
                    status: Some(g.status),
                    ended_at: ended,
                    ..RunUpdate::default()
                },
            )
            .unwrap();
        store.release(&lease).0.blocking_recv().unwrap().unwrap();
    }
    (dir, store)
}

fn raw(dir: &TempDir) -> Connection {
    Connection::open(dir.path().join(".reel/reel.db")).unwrap()
}

/// What the store holds: its runs, the names of the values and the specs left.
fn held(dir: &TempDir, store: &SqliteStore) -> (Vec<String>, BTreeSet<String>, BTreeSet<String>) {
    let runs = store
        .list_runs(&RunFilter::default())
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .rev()
        .collect();
    let conn = raw(dir);
    let digests: BTreeSet<String> = conn
        .prepare("SELECT digest FROM vals")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let names = ["a", "b", "shared", "big", "kept"]
        .into_iter()
        .filter(|n| digests.contains(&reel_flowspec::canonical::digest_value(&value(n))))
        .map(str::to_string)
        .collect();
    let specs: BTreeSet<String> = conn
        .prepare("SELECT json FROM specs")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    (runs, names, specs)
}

fn blob_file(dir: &TempDir, name: &str) -> std::path::PathBuf {
    let d = reel_flowspec::canonical::digest_value(&value(name));
    dir.path().join(".reel/blobs").join(&d[..2]).join(d)
}

/// Old runs of every status, sharing values and specs with each other.
fn mixed() -> Vec<Given> {
    use RunStatus::*;
    let g = |id, status, ended_hours_ago, keep_hours, values, spec| Given {
        id,
        status,
        ended_hours_ago,
        keep_hours,
        values,
        spec,
    };
    vec![
        // Expired: ended 2 h ago, kept for 1 h.
        g(
            "r1-old-ok",
            Succeeded,
            2,
            Some(1),
            &["a", "shared", "big"],
            "s1",
        ),
        g("r2-old-failed", Failed, 2, Some(1), &["b"], "s1"),
        // No keep time recorded: a week, so 8 days ago is expired.
        g("r3-old-canceled", Canceled, 8 * 24, None, &[], "s2"),
        // Kept: its keep time has not passed.
        g(
            "r4-recent",
            Succeeded,
            2,
            Some(3),
            &["shared", "kept"],
            "s3",
        ),
        // Never removed, however old.
        g("r5-waiting", Waiting, 0, Some(0), &["kept"], "s3"),
        g("r6-running", Running, 0, Some(0), &[], "s2"),
    ]
}

#[test]
fn exactly_the_expired_ended_runs_go_with_what_only_they_reference() {
    let (dir, store) = build(&mixed());
    assert!(blob_file(&dir, "big").is_file());
    // Each spec with a binary form beside it (bytes the clean does not read).
    raw(&dir)
        .execute(
            "INSERT INTO spec_binaries SELECT digest, 1, zeroblob(1000) FROM specs",
            [],
        )
        .unwrap();
    let cleaned = store.clean(&CleanScope::Expired, false).unwrap();
    assert_eq!(
        cleaned,
        Cleaned {
            runs: vec![
                "r1-old-ok".to_string(),
                "r2-old-failed".to_string(),
                "r3-old-canceled".to_string()
            ],
            events: 4,
            // a, b and big; `shared` is also r4's.
            values: 3,
            blobs: 1,
            // s1 only: s2 is the running run's.
            specs: 1,
            bytes: cleaned.bytes,
            // r4 (ended, read once) and the two that have not ended.
            runs_read: 3,
            vacuumed: cleaned.vacuumed,
        }
    );
    assert!(cleaned.bytes > 100 * 1024, "{cleaned:?}");
    let (runs, values, specs) = held(&dir, &store);
    assert_eq!(runs, ["r4-recent", "r5-waiting", "r6-running"]);
    assert_eq!(values, ["kept", "shared"].map(String::from).into());
    assert_eq!(
        specs,
        [r#"{"spec":"s2"}"#, r#"{"spec":"s3"}"#]
            .map(String::from)
            .into()
    );
    assert!(!blob_file(&dir, "big").exists());
    let binaries: BTreeSet<String> = raw(&dir)
        .prepare("SELECT digest FROM spec_binaries")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        binaries,
        ["s2", "s3"].map(spec_digest).into(),
        "binaries go with their specs"
    );
    for table in ["journal", "signals", "logs"] {
        let left: i64 = raw(&dir)
            .query_row(
                &format!("SELECT COUNT(*) FROM {table} WHERE run LIKE 'r1%' OR run LIKE 'r2%'"),
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(left, 0, "{table}");
    }
    // Nothing more is due.
    assert_eq!(
        store.clean(&CleanScope::Expired, false).unwrap(),
        Cleaned::default()
    );
}

#[test]
fn all_removes_every_ended_run_and_never_one_that_has_not_ended() {
    let (dir, store) = build(&mixed());
    let cleaned = store.clean(&CleanScope::AllEnded, false).unwrap();
    assert_eq!(cleaned.runs.len(), 4, "{cleaned:?}");
    let (runs, values, _) = held(&dir, &store);
    assert_eq!(runs, ["r5-waiting", "r6-running"]);
    assert_eq!(values, ["kept"].map(String::from).into());
}

#[test]
fn one_run_goes_only_if_it_has_ended() {
    let (dir, store) = build(&mixed());
    let err = store
        .clean(&CleanScope::Run("r5-waiting".to_string()), false)
        .unwrap_err();
    assert_eq!(err.code(), "store.not-ended");
    assert!(err.to_string().contains("r5-waiting is waiting"), "{err}");
    let err = store
        .clean(&CleanScope::Run("nope".to_string()), false)
        .unwrap_err();
    assert_eq!(err.code(), "store.not-found");
    // Not expired, but asked for by name.
    let cleaned = store
        .clean(&CleanScope::Run("r4-recent".to_string()), false)
        .unwrap();
    assert_eq!((cleaned.runs.len(), cleaned.values), (1, 0), "{cleaned:?}");
    let (runs, values, _) = held(&dir, &store);
    assert_eq!(runs.len(), 5);
    assert!(values.contains("kept") && values.contains("shared"));
}

#[test]
fn a_dry_run_removes_nothing_and_says_what_would_go() {
    let (dir, store) = build(&mixed());
    let before = held(&dir, &store);
    let dry = store.clean(&CleanScope::Expired, true).unwrap();
    assert_eq!(held(&dir, &store), before);
    assert!(blob_file(&dir, "big").is_file());
    let wet = store.clean(&CleanScope::Expired, false).unwrap();
    // The dry run kept what r4, ended, references: the clean after it did not read it again.
    assert_eq!((dry.runs_read, wet.runs_read), (3, 2));
    assert_eq!(
        Cleaned {
            vacuumed: false,
            runs_read: dry.runs_read,
            ..wet
        },
        dry
    );
}

#[test]
fn a_value_removed_by_a_clean_is_stored_again_when_a_run_needs_it() {
    let (dir, store) = build(&mixed());
    let path = dir.path().join(".reel");
    // Another process that stored `a` before and remembers it as stored.
    let other = SqliteStore::open(&path, Arc::new(ManualClock::at(T0))).unwrap();
    other.put_value(&value("a")).unwrap();
    let lease = other
        .create_run(
            NewRun {
                first_events: Vec::new(),
                id: "r7-later".to_string(),
                flow: "f".to_string(),
                flow_digest: spec_digest("s3"),
                source: None,
                source_abs: None,
                cwd: "/".to_string(),
                parent: None,
                keep_for_ms: None,
                durability: Durability::Fast,
                created_at: T0,
                kept: Vec::new(),
            },
            &Owner::this_process(),
            60_000,
        )
        .unwrap();
    store.clean(&CleanScope::Expired, false).unwrap();
    assert!(!held(&dir, &store).1.contains("a"));
    // Its next write notices the clean, and storing `a` writes it again.
    other.renew(&lease, 60_000).unwrap();
    let digest = other.put_value(&value("a")).unwrap();
    other
        .append(
            &lease,
            vec![NewEvent {
                at: T0,
                kind: "call_succeeded".to_string(),
                step: Some("s".to_string()),
                index: None,
                attempt: Some(1),
                data: json!({ "output": digest }),
            }],
        )
        .unwrap();
    other.sync(&lease).0.blocking_recv().unwrap().unwrap();
    assert!(held(&dir, &store).1.contains("a"));
    // The same for the store that cleaned.
    store.clean(&CleanScope::AllEnded, false).unwrap();
    let again = store.put_value(&value("b")).unwrap();
    store.clean(&CleanScope::AllEnded, false).unwrap();
    assert_eq!(store.get_value(&again).unwrap(), Some(value("b")));
}

#[test]
fn a_large_clean_gives_the_space_back_and_a_small_one_leaves_pages_to_reuse() {
    // 200 ended runs with a 10 KiB value each, and one kept run.
    let dir = tempfile::tempdir().unwrap();
    let store =
        SqliteStore::open(&dir.path().join(".reel"), Arc::new(ManualClock::at(T0))).unwrap();
    store.put_spec(&spec_digest("s"), "{}").unwrap();
    for i in 0..201 {
        let run = NewRun {
            first_events: Vec::new(),
            id: format!("run{i:03}"),
            flow: "f".to_string(),
            flow_digest: spec_digest("s"),
            source: None,
            source_abs: None,
            cwd: "/".to_string(),
            parent: None,
            keep_for_ms: Some(if i == 200 { u64::MAX } else { 0 }),
            durability: Durability::Fast,
            created_at: T0,
            kept: Vec::new(),
        };
        let lease = store
            .create_run(run, &Owner::this_process(), 60_000)
            .unwrap();
        let digest = store
            .put_value(&json!({ "i": i, "pad": "p".repeat(10 * 1024) }))
            .unwrap();
        store
            .append(
                &lease,
                vec![NewEvent {
                    at: T0,
                    kind: "step_succeeded".to_string(),
                    step: Some("s".to_string()),
                    index: None,
                    attempt: None,
                    data: json!({ "output": digest }),
                }],
            )
            .unwrap();
        store
            .update_run(
                &lease,
                RunUpdate {
                    status: Some(RunStatus::Succeeded),
                    ended_at: Some(T0),
                    ..RunUpdate::default()
                },
            )
            .unwrap();
        store.release(&lease).0.blocking_recv().unwrap().unwrap();
    }
    // The first clean keeps what the runs it reads reference (`refs`), which takes pages of
    // its own; a dry run does that part alone.
    store
        .clean(&CleanScope::Run("run000".to_string()), true)
        .unwrap();
    let (before, _) = store.page_counts().unwrap();

    // A small clean: the freed pages stay in the file, free, and new rows use them.
    let small = store
        .clean(&CleanScope::Run("run000".to_string()), false)
        .unwrap();
    assert!(!small.vacuumed);
    let (total, free) = store.page_counts().unwrap();
    assert_eq!(total, before);
    assert!(free >= 3, "the clean freed pages: {free}");
    let lease = store
        .claim_run("run200", &Owner::this_process(), 60_000)
        .unwrap();
    let Claim::Claimed(lease) = lease else {
        panic!("{lease:?}")
    };
    store
        .put_value(&json!({ "again": "q".repeat(10 * 1024) }))
        .unwrap();
    store.sync(&lease).0.blocking_recv().unwrap().unwrap();
    let (after_reuse, free_after) = store.page_counts().unwrap();
    assert_eq!(after_reuse, total, "the new value went into free pages");
    assert!(free_after < free, "{free_after} < {free}");

    // A large clean: most pages are free, so the file is rewritten smaller.
    let large = store.clean(&CleanScope::Expired, false).unwrap();
    assert_eq!(large.runs.len(), 199);
    assert!(large.vacuumed);
    let (shrunk, free) = store.page_counts().unwrap();
    assert!(shrunk * 4 < before, "{shrunk} pages, from {before}");
    assert_eq!(free, 0);
    let file = std::fs::metadata(dir.path().join(".reel/reel.db"))
        .unwrap()
        .len();
    let page_size: i64 = raw(&dir)
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .unwrap();
    assert_eq!(file, u64::try_from(shrunk * page_size).unwrap());
}
