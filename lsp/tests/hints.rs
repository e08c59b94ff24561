//! Hint labels and tooltips per tool kind, as data: each fixture in `tests/hints/` is a flow, the
//! journal of one recorded run of it (a line per event) and, optionally, the text after an edit;
//! its snapshot is that text with each hint written where it lands (`⟨label⟩`, as the
//! end-to-end tests show hints) and each hint's tooltip below.
//!
//! A fixture:
//!
//! ```text
//! # What the case shows.
//! flow f { … }
//! --- run waiting
//! 0 page started
//! 340 page succeeded {"status": 200, "headers": {}, "body": "ok"}
//! --- edited
//! flow f { … }
//! ```
//!
//! An event line is `MS STEP[INDEX] VERB REST`, at `MS` milliseconds into the run: `started
//! [ATTEMPT]`, `call-ok JSON`, `call-failed CODE MESSAGE`, `call-retried CODE MESSAGE` (a
//! failed attempt that is tried again), `succeeded JSON`, `failed CODE MESSAGE`, `skipped
//! REASON`, `awaits SIGNAL`, `received JSON`, `sleeps UNTIL_MS`; `[INDEX]` is a `foreach` call's
//! index, and `\n` in a message a line break.

use std::path::Path;
use std::sync::Arc;

use salsa::Setter;

use reel_compiler::{RootDb, SourceFile, build_flow};
use reel_journal::error::RunError;
use reel_journal::journal::Event;
use reel_lsp::hints::{self, Watched};
use reel_lsp::ide::Ctx;
use reel_lsp::runs::{Pins, Stores, Views};
use reel_store::{
    Durability, ManualClock, NewRun, Owner, RunStatus, RunUpdate, SqliteStore, Store,
};
use tower_lsp_server::lsp_types::{InlayHintLabel, InlayHintTooltip, Uri};

/// The run's start, ms since epoch (2023-11-14 22:13:20 UTC).
const START: i64 = 1_700_000_000_000;

#[test]
fn hint_fixtures() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hints");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no fixtures in {}", dir.display());
    for path in names {
        let fixture = std::fs::read_to_string(&path).unwrap();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let shown = std::panic::catch_unwind(|| run_fixture(&fixture))
            .unwrap_or_else(|_| panic!("fixture {}", path.display()));
        insta::with_settings!({ snapshot_suffix => name.clone(), input_file => &path, prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!("hints", shown);
        });
    }
}

/// The fixture's parts: its flow, the run's status and events, and the text after an edit.
struct Fixture<'a> {
    text: &'a str,
    status: RunStatus,
    events: Vec<&'a str>,
    edited: Option<&'a str>,
}

fn parse(fixture: &str) -> Fixture<'_> {
    // The leading `#` lines say what the case shows.
    let mut body = fixture;
    while body.starts_with('#') {
        body = body.split_once('\n').map_or("", |(_, rest)| rest);
    }
    let (text, rest) = body
        .split_once("--- run ")
        .expect("a `--- run STATUS` line");
    let (head, rest) = rest.split_once('\n').unwrap_or((rest, ""));
    let status = match head.trim() {
        "running" => RunStatus::Running,
        "waiting" => RunStatus::Waiting,
        "succeeded" => RunStatus::Succeeded,
        "failed" => RunStatus::Failed,
        other => panic!("unknown status `{other}`"),
    };
    let (events, edited) = match rest.split_once("--- edited\n") {
        Some((events, edited)) => (events, Some(edited)),
        None => (rest, None),
    };
    let events = events.lines().filter(|l| !l.trim().is_empty()).collect();
    Fixture {
        text,
        status,
        events,
        edited,
    }
}

/// One event line as the journal's event, storing the values it names.
fn event(line: &str, store: &SqliteStore) -> (i64, Event) {
    let mut words = line.splitn(4, ' ');
    let mut next = || words.next().unwrap_or("");
    let at: i64 = next().parse().expect("a time in ms");
    let word = next();
    let (step, index) = match word.split_once('[') {
        Some((step, index)) => (step.to_string(), index.trim_end_matches(']').parse().ok()),
        None => (word.to_string(), None),
    };
    let verb = next().to_string();
    let rest = next().to_string();
    let value = |text: &str| {
        let v: serde_json::Value = serde_json::from_str(text).expect("a JSON value");
        store.put_value(&v).unwrap()
    };
    let error = |text: &str| {
        let (code, message) = text.split_once(' ').unwrap_or((text, ""));
        RunError::new(code, message.replace("\\n", "\n"))
    };
    let event = match verb.as_str() {
        "started" => Event::StepStarted {
            step,
            index,
            attempt: rest.parse().unwrap_or(1),
            inputs: "i".into(),
            key: None,
        },
        "call-ok" => Event::CallSucceeded {
            step,
            index,
            attempt: 1,
            output: value(&rest),
        },
        "call-failed" | "call-retried" => Event::CallFailed {
            step,
            index,
            attempt: 1,
            error: error(&rest),
            retry_at: (verb == "call-retried").then_some(START + at + 1),
        },
        "succeeded" => Event::StepSucceeded {
            step,
            output: value(&rest),
            attempts: 1,
        },
        "failed" => Event::StepFailed {
            step,
            error: error(&rest),
        },
        "skipped" => Event::StepSkipped { step, reason: rest },
        "awaits" => Event::SignalAwaited {
            step,
            index,
            name: rest,
            deadline: None,
        },
        "received" => Event::SignalReceived {
            step,
            index,
            name: "signal".into(),
            signal: 0,
            payload: value(&rest),
        },
        "sleeps" => Event::TimerStarted {
            step,
            index,
            until: START + rest.parse::<i64>().expect("a time in ms"),
        },
        other => panic!("unknown event `{other}` in `{line}`"),
    };
    (START + at, event)
}

/// Records the fixture's run and renders the hints of its (edited) text with their tooltips.
fn run_fixture(fixture: &str) -> String {
    let fixture = parse(fixture);
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("store");
    let path = tmp.path().join("flow.reel");
    std::fs::write(&path, fixture.text).unwrap();
    let abs = std::fs::canonicalize(&path).unwrap();

    let db = RootDb::default();
    let path_text = abs.to_string_lossy().into_owned();
    let file = SourceFile::new(&db, path_text.clone(), String::new(), fixture.text.into());
    let flow = reel_compiler::flow_names(&db, file)
        .into_iter()
        .next()
        .expect("a flow");
    let spec = build_flow(&db, file, &flow).expect("the fixture's flow builds");

    let store = SqliteStore::open(&home, Arc::new(ManualClock::at(START))).unwrap();
    store.put_spec(&spec.digest, &spec.to_json()).unwrap();
    let first_events = fixture
        .events
        .iter()
        .map(|line| {
            let (at, e) = event(line, &store);
            e.to_row(at)
        })
        .collect();
    let run = NewRun {
        id: "r1".into(),
        flow: flow.clone(),
        flow_digest: spec.digest.clone(),
        source: None,
        source_abs: Some(path_text),
        cwd: "/".into(),
        parent: None,
        keep_for_ms: None,
        durability: Durability::Fast,
        created_at: START,
        first_events,
        kept: Vec::new(),
    };
    let lease = store
        .create_run(run, &Owner::this_process(), 60_000)
        .unwrap();
    let ended = !matches!(fixture.status, RunStatus::Running | RunStatus::Waiting);
    let update = RunUpdate {
        status: Some(fixture.status),
        ended_at: ended.then_some(START + 1_000),
        ..Default::default()
    };
    store.update_run(&lease, update).unwrap();
    store.sync(&lease).0.blocking_recv().unwrap().unwrap();
    drop(store);

    let text = fixture.edited.unwrap_or(fixture.text);
    let mut db = db;
    if fixture.edited.is_some() {
        file.set_text(&mut db).to(text.into());
    }
    let cx = Ctx::new(&db, file);
    let stores = Stores::new(Some(home.into_os_string()));
    let uri: Uri = format!("file://{}", abs.display()).parse().unwrap();
    let got = hints::inlay_hints(
        &cx,
        &uri,
        &stores,
        &Pins::default(),
        &Views::default(),
        &Watched::default(),
    );
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut tips = String::new();
    for hint in &got {
        let InlayHintLabel::String(label) = &hint.label else {
            panic!("a string label");
        };
        assert!(
            label.chars().count() <= reel_lsp::runs::HINT_WIDTH,
            "longer than a hint may be: {label}"
        );
        let line = hint.position.line as usize;
        lines[line].push_str(&format!(" ⟨{label}⟩"));
        let Some(InlayHintTooltip::MarkupContent(tip)) = &hint.tooltip else {
            panic!("a Markdown tooltip");
        };
        tips.push_str(&format!("\n--- tooltip, line {}\n{}", line + 1, tip.value));
    }
    format!("{}\n{tips}", lines.join("\n"))
}
