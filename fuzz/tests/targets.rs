//! The fuzz targets (issue 12, hostile input), each run for `REEL_FUZZ_SECS` (default
//! [`reel_fuzz::DEFAULT_SECS`]) with the seed `REEL_FUZZ_SEED` (random, printed):
//!
//! - `source`: the parser, the checker and the formatter on mutants of the examples: no panic;
//!   a file that formats formats to a fixed point that parses clean, and keeps its meaning (a
//!   file that checks clean builds, after formatting, the same FlowSpecs but for where its
//!   text lies: every step's semantic digest, and the spec without its spans and digest).
//! - `journal_rows`: the fold of rows made of mutated journals: no panic; a row that does not
//!   read is a hole, never a guess; folding in two parts gives what one fold gives.
//! - `journal_store`: a real store's journal with rows cut short, rewritten or removed: a
//!   view reads past every hole and a resume's fold refuses a journal that has one.
//! - `lsp_frames`: the language server's guard (`lsp/src/stdio.rs`) on mutated streams of
//!   framed messages, cut into random pieces: no panic, every message passed on is one the
//!   server decodes, the pieces do not change what is read, and a sound message after any
//!   garbage is still served.
//! - `cassette`: the cassette reader (`Cassette::parse`, then `journal`) on mutants of the
//!   corpus's cassettes: no panic; a cassette that reads gives a journal whose every value
//!   digest it names is in its value map, and whose events fold.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reel_compiler::{RootDb, Severity, SourceFile, build_flow, file_diagnostics, flow_names};
use reel_fuzz::{cassette_seeds, example_seeds, fuzz};
use reel_journal::RunError;
use reel_journal::cassette::Cassette;
use reel_journal::fold::{Folded, Holes, fold_journal, holes};
use reel_journal::journal::{Event, Resolution};
use reel_lsp::stdio::{Deframer, Frame};
use reel_store::{Durability, EventRow, ManualClock, NewRun, Owner, SqliteStore, Store};
use serde_json::{Value, json};

/// What a file builds to, by flow: each spec without where its text lies, and its steps'
/// semantic digests.
fn meaning(text: &str) -> Option<Vec<(Value, Vec<String>)>> {
    let db = RootDb::default();
    let file = SourceFile::new(&db, "f.reel".into(), "/tools".into(), Arc::from(text));
    let diags = file_diagnostics(&db, file);
    if diags.iter().any(|d| d.severity == Severity::Error) {
        return None;
    }
    let mut out = Vec::new();
    for flow in flow_names(&db, file) {
        let spec = build_flow(&db, file, &flow)?;
        assert!(spec.verify_digest(), "a built spec verifies its digest");
        let digests = spec
            .steps
            .iter()
            .map(|s| s.semantic_digest.clone())
            .collect();
        let mut value: Value = serde_json::from_str(&spec.to_json()).expect("a spec is JSON");
        strip(&mut value);
        out.push((value, digests));
    }
    Some(out)
}

/// Removes what moves when text is reformatted: spans and the digest that covers them.
fn strip(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for key in ["span", "name_span", "digest"] {
                m.remove(key);
            }
            m.values_mut().for_each(strip);
        }
        Value::Array(a) => a.iter_mut().for_each(strip),
        _ => {}
    }
}

#[test]
fn source() {
    let seeds = example_seeds();
    fuzz("source", &seeds, |bytes| {
        let text = String::from_utf8_lossy(bytes);
        let parsed = reel_syntax::parse(&text);
        let meant = meaning(&text);
        match reel_syntax::format::format(&text) {
            Ok(formatted) => {
                assert!(
                    reel_syntax::parse(&formatted).diagnostics.is_empty(),
                    "formatted text parses clean:\n{formatted}"
                );
                let again = reel_syntax::format::format(&formatted).expect("formats again");
                assert_eq!(again, formatted, "formatting is a fixed point");
                if let Some(meant) = meant {
                    assert_eq!(
                        meaning(&formatted),
                        Some(meant),
                        "formatting keeps the meaning:\n{formatted}"
                    );
                }
            }
            Err(e) => assert!(
                !parsed.diagnostics.is_empty() && e.diagnostics == parsed.diagnostics,
                "only a file with syntax errors is refused, with them"
            ),
        }
    });
}

/// Journals of every kind of event, as JSON text `[[kind, step, index, attempt, data], …]`.
fn journal_seeds() -> Vec<Vec<u8>> {
    let d = |c: char| c.to_string().repeat(64);
    let started = |step: &str, index, attempt, key: Option<&str>| Event::StepStarted {
        step: step.into(),
        index,
        attempt,
        inputs: d('1'),
        key: key.map(str::to_string),
    };
    let journals: Vec<Vec<Event>> = vec![
        vec![
            started("a", Some(0), 1, Some("k0")),
            started("a", Some(1), 1, Some("k1")),
            Event::CallSucceeded {
                step: "a".into(),
                index: Some(0),
                attempt: 1,
                output: d('2'),
            },
            Event::CallFailed {
                step: "a".into(),
                index: Some(1),
                attempt: 1,
                error: RunError::new("tool.http.status", "503"),
                retry_at: Some(9),
            },
            Event::UnknownOutcome {
                step: "a".into(),
                index: Some(1),
                attempt: 1,
                key: "k1".into(),
                then: Resolution::Repeated,
            },
            started("a", Some(1), 2, Some("k1")),
            Event::EffectRecorded {
                step: "a".into(),
                index: Some(1),
                attempt: 2,
                key: "k1".into(),
                result: d('3'),
            },
            Event::StepSucceeded {
                step: "a".into(),
                output: d('4'),
                attempts: 3,
            },
            Event::SignalAwaited {
                step: "b".into(),
                index: None,
                name: "go".into(),
                deadline: Some(5),
            },
            Event::RunWaiting {
                due_at: Some(5),
                signals: vec!["go".into()],
            },
            Event::RunResumed {
                reason: "worker".into(),
                by: "h:1".into(),
            },
            Event::SignalReceived {
                step: "b".into(),
                index: None,
                name: "go".into(),
                signal: 0,
                payload: d('5'),
            },
            Event::StepSkipped {
                step: "c".into(),
                reason: "`when` was false".into(),
            },
            Event::TimerStarted {
                step: "t".into(),
                index: None,
                until: 10,
            },
            Event::TimerFired {
                step: "t".into(),
                index: None,
                until: 10,
            },
            Event::CallReused {
                step: "r".into(),
                index: None,
                attempt: 1,
                parent: "p".into(),
                seq: 3,
            },
            Event::StepFailed {
                step: "f".into(),
                error: RunError::new("tool.exec.exit", "1"),
            },
            Event::RunFinished {
                status: "failed".into(),
                output: None,
                error: Some(RunError::new("tool.exec.exit", "1")),
            },
        ],
        vec![
            started("pay", None, 1, Some("k")),
            Event::UnknownOutcome {
                step: "pay".into(),
                index: None,
                attempt: 1,
                key: "k".into(),
                then: Resolution::Held,
            },
            Event::StepFailed {
                step: "pay".into(),
                error: RunError::new("run.unknown-outcome", "unknown"),
            },
            Event::RunFinished {
                status: "succeeded".into(),
                output: Some(d('6')),
                error: None,
            },
        ],
    ];
    journals
        .iter()
        .map(|events| {
            let rows: Vec<Value> = events
                .iter()
                .enumerate()
                .map(|(n, e)| {
                    let r = e.to_row(n as i64);
                    json!([r.kind, r.step, r.index, r.attempt, r.data])
                })
                .collect();
            serde_json::to_vec(&rows).expect("rows are JSON")
        })
        .collect()
}

/// The rows a (mutated) journal text holds, read leniently: whatever has the shape of a row.
fn rows_of(bytes: &[u8]) -> Vec<EventRow> {
    let Ok(Value::Array(items)) = serde_json::from_slice::<Value>(bytes) else {
        return Vec::new();
    };
    items
        .into_iter()
        .enumerate()
        .filter_map(|(n, item)| {
            let Value::Array(parts) = item else {
                return None;
            };
            let part = |i: usize| parts.get(i).cloned().unwrap_or(Value::Null);
            Some(EventRow {
                run: "r".into(),
                seq: n as u64,
                at: n as i64,
                kind: part(0).as_str().unwrap_or_default().to_string(),
                step: part(1).as_str().map(str::to_string),
                index: part(2).as_u64().map(|i| i as u32),
                attempt: part(3).as_u64().map(|a| a as u32),
                data: part(4),
            })
        })
        .collect()
}

#[test]
fn journal_rows() {
    let seeds = journal_seeds();
    let mut rng = StdRng::seed_from_u64(1);
    fuzz("journal_rows", &seeds, |bytes| {
        let rows = rows_of(bytes);
        let mut whole = Folded::with_views();
        for row in &rows {
            let folded = whole.apply_row(row);
            assert_eq!(
                folded.is_err(),
                Event::from_row(row).is_err(),
                "a row that does not read is a hole: {row:?}"
            );
        }
        assert_eq!(whole.events, rows.len() as u64);
        // Folding in parts gives what one fold gives.
        let cut = rng.random_range(0..=rows.len());
        let mut parts = Folded::with_views();
        for row in &rows[..cut] {
            let _ = parts.apply_row(row);
        }
        for row in &rows[cut..] {
            let _ = parts.apply_row(row);
        }
        assert_eq!(parts.views, whole.views);
        assert_eq!(parts.steps, whole.steps);
        assert_eq!(parts.calls, whole.calls);
    });
}

#[test]
fn journal_store() {
    let seeds = journal_seeds();
    let tmp = tempfile::tempdir().expect("a temp dir");
    let mut n = 0u64;
    fuzz("journal_store", &seeds, |bytes| {
        n += 1;
        // The rows that read, as a journal; the mutated bytes then choose what to spoil.
        let rows: Vec<EventRow> = rows_of(bytes)
            .into_iter()
            .filter(|r| Event::from_row(r).is_ok())
            .collect();
        if rows.is_empty() {
            return;
        }
        let dir = tmp.path().join(format!("s{n}"));
        let store = SqliteStore::open(&dir, Arc::new(ManualClock::at(0))).expect("a store");
        let run = NewRun {
            id: "r".into(),
            flow: "f".into(),
            flow_digest: "d".repeat(64),
            source: None,
            source_abs: None,
            cwd: "/".into(),
            parent: None,
            keep_for_ms: None,
            durability: Durability::Fast,
            created_at: 0,
            first_events: rows
                .iter()
                .map(|r| reel_store::NewEvent {
                    at: r.at,
                    kind: r.kind.clone(),
                    step: r.step.clone(),
                    index: r.index,
                    attempt: r.attempt,
                    data: r.data.clone(),
                })
                .collect(),
            kept: Vec::new(),
        };
        let lease = store
            .create_run(run, &Owner::this_process(), 60_000)
            .expect("the run is created");
        drop(lease);
        let mut rng = StdRng::seed_from_u64(bytes.iter().map(|&b| u64::from(b)).sum());
        let conn = rusqlite::Connection::open(dir.join("reel.db")).expect("the database opens");
        let spoiled = rng.random_range(0..=2usize.min(rows.len()));
        for _ in 0..spoiled {
            let seq = rng.random_range(0..rows.len()) as i64;
            let sql = match rng.random_range(0..4) {
                0 => "UPDATE journal SET data = substr(data, 1, length(data) / 2) WHERE seq = ?1",
                1 => "UPDATE journal SET kind = 'from_the_future' WHERE seq = ?1",
                2 => "UPDATE journal SET data = '{}' WHERE seq = ?1",
                _ => "DELETE FROM journal WHERE seq = ?1",
            };
            conn.execute(sql, [seq]).expect("the row is spoiled");
        }
        drop(conn);
        let found = holes(&store, "r").expect("holes are listed, not an error");
        let mut view = Folded::with_views();
        view.read(&store, "r", Holes::PassOver)
            .expect("a view reads past holes");
        assert_eq!(view.holes, found, "the view passes over exactly the holes");
        // Held whole (a short journal) or read past succeeded steps (a long one): the same.
        for length in [rows.len() as u64, u64::MAX] {
            let resume = fold_journal(&store, "r", length);
            assert_eq!(
                resume.is_err(),
                !found.is_empty(),
                "a resume refuses a journal with a hole, and only such a one: {found:?}"
            );
        }
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    });
}

/// `body` framed as the base protocol frames it.
fn framed(body: &str) -> Vec<u8> {
    format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

/// A session's worth of messages, framed: the seeds of `lsp_frames`.
fn lsp_seeds() -> Vec<Vec<u8>> {
    let text = String::from_utf8_lossy(&example_seeds()[0]).into_owned();
    let messages = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}}),
        json!({"jsonrpc": "2.0", "method": "initialized", "params": {}}),
        json!({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": "file:///w/f.reel", "languageId": "reel", "version": 1, "text": text}}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "textDocument/hover", "params": {
            "textDocument": {"uri": "file:///w/f.reel"}, "position": {"line": 1, "character": 3}}}),
        json!({"jsonrpc": "2.0", "id": 7, "result": null}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "shutdown"}),
    ];
    let all: Vec<u8> = messages
        .iter()
        .flat_map(|m| framed(&m.to_string()))
        .collect();
    let mut seeds = vec![all];
    seeds.extend(messages.iter().map(|m| framed(&m.to_string())));
    seeds
}

/// Every frame `bytes` holds, pushed in the given pieces.
fn frames(bytes: &[u8], cuts: &[usize]) -> Vec<Frame> {
    let mut d = Deframer::default();
    let mut out = Vec::new();
    let mut from = 0;
    for &cut in cuts.iter().chain(std::iter::once(&bytes.len())) {
        let cut = cut.clamp(from, bytes.len());
        d.push(&bytes[from..cut]);
        from = cut;
        while let Some(f) = d.next_frame() {
            out.push(f);
        }
    }
    out
}

#[test]
fn lsp_frames() {
    let seeds = lsp_seeds();
    let sentinel = json!({"jsonrpc": "2.0", "id": 99, "method": "shutdown"}).to_string();
    let mut rng = StdRng::seed_from_u64(2);
    fuzz("lsp_frames", &seeds, |bytes| {
        let whole = frames(bytes, &[]);
        for f in &whole {
            match f {
                Frame::Message(body) => {
                    let v: Value = serde_json::from_slice(body).expect("a message is JSON");
                    assert_eq!(v["jsonrpc"], "2.0", "{v}");
                }
                Frame::Refused(answer) => {
                    let code = answer["error"]["code"].as_i64();
                    assert!(matches!(code, Some(-32700 | -32600)), "{answer}");
                }
            }
        }
        let mut cuts: Vec<usize> = (0..rng.random_range(0..8))
            .map(|_| rng.random_range(0..=bytes.len()))
            .collect();
        cuts.sort_unstable();
        assert_eq!(
            frames(bytes, &cuts),
            whole,
            "the pieces the bytes arrive in change nothing (cut at {cuts:?})"
        );
        // Whatever came before, two sound messages after it: the last is served intact.
        let mut after = bytes.to_vec();
        after.extend(framed(&sentinel));
        after.extend(framed(&sentinel));
        let served = frames(&after, &[]);
        assert_eq!(
            served.last(),
            Some(&Frame::Message(sentinel.clone().into_bytes())),
            "a sound message after garbage is served"
        );
    });
}

#[test]
fn cassette() {
    let seeds = cassette_seeds();
    // Mutants that still read as cassettes: the journal is reached by more than the seeds.
    let mut read = 0usize;
    fuzz("cassette", &seeds, |bytes| {
        let text = String::from_utf8_lossy(bytes);
        let Ok(cassette) = Cassette::parse(&text) else {
            return;
        };
        read += 1;
        // Both answers a reader may give for a step: with `foreach` and without.
        for foreach in [true, false] {
            let Ok(journal) = cassette.journal(&|_| Some(foreach)) else {
                continue;
            };
            for (_, event) in &journal.events {
                if let Event::StepSucceeded { output, .. } = event {
                    assert!(
                        journal.values.contains_key(output),
                        "a step's output is in the value map: {event:?}"
                    );
                }
            }
            let mut folded = Folded::with_views();
            for (at, event) in &journal.events {
                let row = event.to_row(*at);
                let row = EventRow {
                    run: "r".into(),
                    seq: folded.events,
                    at: row.at,
                    kind: row.kind,
                    step: row.step,
                    index: row.index,
                    attempt: row.attempt,
                    data: row.data,
                };
                assert_eq!(folded.apply_row(&row), Ok(()), "its events read back");
            }
        }
    });
    eprintln!("cassette: {read} inputs read as cassettes");
    assert!(read > seeds.len(), "mutants reach the journal: {read}");
}
