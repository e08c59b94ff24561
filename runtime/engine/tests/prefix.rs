//! Resuming from any prefix of a journal ends as the uninterrupted run does.
//!
//! A flow (generated, or one of the examples) runs uninterrupted with fake tools and a virtual
//! clock against a real SQLite store. Then, for every prefix of its journal, a fresh store is
//! given only that prefix (and the values and flow it names) and the run is resumed from it.
//! Its journal must hold the same events as the uninterrupted one (kinds, steps, indexes,
//! attempts, data with digests and keys), times aside, `run_resumed`/`run_waiting` aside (where
//! a run parks depends on where it was cut), and allowing the documented re-run of a call whose
//! start was recorded but not its result (its `step_started` appears twice). Nothing recorded
//! as finished runs again.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use proptest::prelude::*;
use reel_flowspec::Type;
use reel_flowspec::canonical::name_value;
use reel_runtime::scope::rfc3339;
use reel_runtime::{
    BoxFuture, Clock, EnvSecrets, Environment, NoProgress, RiderConfig, RunDeps, RunOutcome,
    StartRequest, Tools, resume, start,
};
use reel_store::{
    Durability, EventRow, Flow, NewEvent, NewRun, Owner, RunStatus, SqliteStore, Store, StoreRead,
};
use reel_tools::{ToolCall, ToolError, ToolOutput};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

mod support;
use support::compile;

/// Virtual time: it moves only when the engine waits, straight to what it waits for.
struct VirtualClock(AtomicI64);

impl Clock for VirtualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
    fn sleep_until(&self, at_ms: i64) -> BoxFuture<'static, ()> {
        self.0.fetch_max(at_ms, Ordering::SeqCst);
        Box::pin(std::future::ready(()))
    }
}

/// Tools that answer at once: `echo` its value; `http.get` of `http://fake/fail-until/T`
/// fails (retryably) before virtual time T, then answers (other urls answer a small JSON
/// body); `exec`, `fs.*` and other `http.*` answer fixed results of their shape, and a user
/// tool a value of its declared output type.
struct FakeTools(Arc<VirtualClock>);

/// A value of type `ty`, the same every time.
fn fake_of(ty: &Type) -> Value {
    match ty {
        Type::String => json!("fake"),
        Type::Int => json!(3),
        Type::Float => json!(1.5),
        Type::Bool => json!(true),
        Type::Duration => json!("1s"),
        Type::List { item } => json!([fake_of(item), fake_of(item)]),
        Type::Record { fields } => Value::Object(
            fields
                .iter()
                .map(|f| (f.name.clone(), fake_of(&f.ty)))
                .collect(),
        ),
        _ => Value::Null,
    }
}

impl Tools for FakeTools {
    fn call(
        &self,
        call: ToolCall,
        _cancel: CancellationToken,
    ) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
        let now = self.0.now_ms();
        let outcome = match call.tool.as_str() {
            "echo" => Ok(ToolOutput {
                value: call.args.get("value").cloned().unwrap_or(Value::Null),
                log: String::new(),
            }),
            "http.get" => {
                let url = call.args.get("url").and_then(Value::as_str).unwrap_or("");
                let until: i64 = url
                    .rsplit('/')
                    .next()
                    .and_then(|t| t.parse().ok())
                    .unwrap_or(0);
                if now < START + until {
                    Err(ToolError::new("tool.http.status", "503 (fake)", true))
                } else {
                    let body = if url.starts_with("http://fake/") {
                        json!(url)
                    } else {
                        json!({ "items": [{ "name": "a", "value": 1 }, { "name": "b", "value": 2 }] })
                    };
                    Ok(ToolOutput {
                        value: json!({ "status": 200, "headers": {}, "body": body }),
                        log: String::new(),
                    })
                }
            }
            _ if call.user.is_some() => Ok(ToolOutput {
                value: fake_of(&call.user.as_ref().expect("a user tool").output),
                log: String::new(),
            }),
            "http.post" | "http.put" | "http.delete" => Ok(ToolOutput {
                value: json!({ "status": 200, "headers": {}, "body": call.args.get("body") }),
                log: String::new(),
            }),
            "exec" => Ok(ToolOutput {
                value: json!({ "stdout": "fake\n", "stderr": "", "json": null }),
                log: String::new(),
            }),
            "fs.read" => Ok(ToolOutput {
                value: json!({ "text": "one two three" }),
                log: String::new(),
            }),
            "fs.write" => {
                let text = call.args.get("text").and_then(Value::as_str).unwrap_or("");
                Ok(ToolOutput {
                    value: json!({ "bytes": text.len() }),
                    log: String::new(),
                })
            }
            other => Err(ToolError::new(
                "tool.args",
                format!("no fake {other}"),
                false,
            )),
        };
        Box::pin(std::future::ready(outcome))
    }
}

struct NoEnv;

impl Environment for NoEnv {
    fn get(&self, _: &str) -> Option<String> {
        None
    }
}

/// Virtual time at the start of every run.
const START: i64 = 1_000_000;

fn deps(store: Arc<dyn Store>, clock: Arc<VirtualClock>) -> RunDeps {
    RunDeps {
        store,
        tools: Arc::new(FakeTools(clock.clone())),
        clock,
        secrets: Arc::new(EnvSecrets::from_pairs([(
            "api_token".into(),
            "t0ken".into(),
        )])),
        env: Arc::new(NoEnv),
        progress: Arc::new(NoProgress),
        shutdown: CancellationToken::new(),
        owner: Owner::this_process(),
    }
}

/// Resumes a parked run until it ends: the clock goes to its timer, a signal it waits for is
/// sent (once).
async fn until_ended(deps: &RunDeps, clock: &VirtualClock, mut out: RunOutcome) -> RunOutcome {
    let cfg = RiderConfig::default();
    for _ in 0..32 {
        if out.status != RunStatus::Waiting {
            return out;
        }
        let row = deps.store.run(&out.run).expect("a row").expect("the run");
        if !row.waiting_on.is_empty()
            && deps
                .store
                .pending_signals(&out.run)
                .expect("signals")
                .is_empty()
        {
            for name in &row.waiting_on {
                deps.store
                    .send_signal(&out.run, name, &json!({ "n": 7 }))
                    .expect("the signal is kept");
            }
        } else if let Some(due) = row.due_at {
            clock.0.fetch_max(due, Ordering::SeqCst);
        }
        out = resume(deps, &cfg, &out.run, "due")
            .await
            .expect("the run resumes");
    }
    panic!("the run did not end: {out:?}");
}

fn journal(store: &dyn Store, run: &str) -> Vec<EventRow> {
    let mut rows = Vec::new();
    store
        .read_journal(run, 0, &mut |row| {
            rows.push(row);
            Flow::Continue
        })
        .expect("the journal reads");
    rows
}

/// The events to compare: times, resumes and parks aside; a call's start recorded twice (its
/// result was not recorded before the cut, so it was made again) counted once, and the step's
/// count of attempts without the re-run. An effect made again must say so first: its
/// `unknown_outcome` (`repeated`, with the key it started with) comes before the repeat.
fn normalized(rows: &[EventRow]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut reruns: HashMap<Option<String>, u64> = HashMap::new();
    let mut marked: Vec<(Option<String>, Option<u32>, Value)> = Vec::new();
    for r in rows {
        if matches!(r.kind.as_str(), "run_resumed" | "run_waiting") {
            continue;
        }
        if r.kind == "unknown_outcome" {
            assert_eq!(r.data["then"], "repeated", "{r:?}");
            marked.push((r.step.clone(), r.index, r.data["key"].clone()));
            continue;
        }
        if r.kind == "step_started" {
            let key = &r.data["key"];
            let mark = marked
                .iter()
                .position(|(s, i, k)| *s == r.step && *i == r.index && k == key);
            let is_marked = mark.map(|m| marked.remove(m)).is_some();
            let repeat = out.iter().any(|e| {
                *e == format!(
                    "{} {:?}{:?}#{:?} {}",
                    r.kind, r.step, r.index, r.attempt, r.data
                )
            });
            assert_eq!(
                is_marked,
                repeat && !key.is_null(),
                "an effect's start is marked as a repeat after an unknown outcome exactly when it \
                 is one: {r:?}"
            );
        }
        let mut data = r.data.clone();
        if r.kind == "step_succeeded"
            && let Some(n) = reruns.get(&r.step)
            && let Some(a) = data.get_mut("attempts")
        {
            *a = json!(a.as_u64().unwrap_or(0) - n);
        }
        let e = format!(
            "{} {:?}{:?}#{:?} {}",
            r.kind, r.step, r.index, r.attempt, data
        );
        if r.kind == "step_started" && out.contains(&e) {
            *reruns.entry(r.step.clone()).or_default() += 1;
            continue;
        }
        out.push(e);
    }
    assert!(marked.is_empty(), "marked and never repeated: {marked:?}");
    out.sort();
    out
}

/// Every 64-hex-digit string in `v` (digests, and keys, which name no value).
fn digests(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) if s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()) => {
            out.push(s.clone())
        }
        Value::Array(a) => a.iter().for_each(|x| digests(x, out)),
        Value::Object(o) => o.values().for_each(|x| digests(x, out)),
        _ => {}
    }
}

/// A store holding the first `k` events of `rows` (and the flow and the run's values),
/// with the run released, as a crash after the `k`-th event leaves it.
async fn prefix_store(
    dir: &Path,
    from: &SqliteStore,
    rows: &[EventRow],
    k: usize,
    clock: Arc<VirtualClock>,
) -> Arc<SqliteStore> {
    let store = SqliteStore::open(dir, clock).expect("a store");
    let row = from.run(&rows[0].run).expect("a row").expect("the run");
    let spec = from
        .get_spec(&row.flow_digest)
        .expect("a spec")
        .expect("the spec");
    store
        .put_spec(&row.flow_digest, &spec)
        .expect("the spec is kept");
    // Every value the run put, as a crash leaves them (a value is kept before the event that
    // names it): those the journal names, and the timers' wake-ups, which it does not.
    let mut names = Vec::new();
    for r in rows {
        digests(&r.data, &mut names);
        if r.kind == "timer_fired"
            && let Some(until) = r.data.get("until").and_then(Value::as_i64)
        {
            names.push(name_value(&json!({ "woke_at": rfc3339(until) })));
        }
    }
    for d in names {
        // Under the digest the journal names (a signal's payload is named by its digest
        // however short).
        if let Some(v) = from.get_value(&d).expect("a value reads")
            && reel_flowspec::canonical::literal(&d).is_none()
        {
            store
                .put_canonical(&d, reel_flowspec::canonical::canonical_json(&v))
                .expect("the value is kept");
        }
    }
    let event = |r: &EventRow| NewEvent {
        at: r.at,
        kind: r.kind.clone(),
        step: r.step.clone(),
        index: r.index,
        attempt: r.attempt,
        data: r.data.clone(),
    };
    let new = NewRun {
        id: row.id.clone(),
        flow: row.flow.clone(),
        flow_digest: row.flow_digest.clone(),
        source: None,
        source_abs: None,
        cwd: row.cwd.clone(),
        parent: None,
        keep_for_ms: None,
        durability: row.durability,
        created_at: rows[0].at,
        first_events: vec![event(&rows[0])],
        kept: Vec::new(),
    };
    let lease = store
        .create_run(new, &Owner::this_process(), 15_000)
        .expect("the run is made");
    store
        .append(&lease, rows[1..k].iter().map(event).collect())
        .expect("the prefix is appended");
    store.sync(&lease).await.expect("the prefix lands");
    store.release(&lease).await.expect("the run is let go");
    Arc::new(store)
}

/// Runs `source` uninterrupted, then from every prefix of its journal, and compares.
async fn check(source: &str, durability: Durability) {
    check_with(source, durability, serde_json::Map::new()).await;
}

/// [`check`] with the run's inputs.
async fn check_with(source: &str, durability: Durability, inputs: serde_json::Map<String, Value>) {
    let spec = Arc::new(compile(source));
    // In memory where the system offers it: a store per prefix, and fsyncs cost nothing there.
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    }
    .expect("a temp dir");
    let clock = Arc::new(VirtualClock(AtomicI64::new(START)));
    let store =
        Arc::new(SqliteStore::open(&dir.path().join("whole"), clock.clone()).expect("a store"));
    let d = deps(store.clone(), clock.clone());
    let req = StartRequest {
        run_id: "r1".into(),
        spec,
        inputs,
        cwd: dir.path().to_path_buf(),
        source: None,
        source_abs: None,
        keep_for_ms: None,
        durability,
        seed: 7,
        parent: None,
    };
    let first = start(&d, &RiderConfig::default(), req)
        .await
        .expect("the run starts");
    let whole = until_ended(&d, &clock, first).await;
    let rows = journal(store.as_ref(), "r1");
    let expected = normalized(&rows);
    for k in 1..rows.len() {
        // The clock stands where the prefix's last event left it.
        let clock = Arc::new(VirtualClock(AtomicI64::new(rows[k - 1].at)));
        let prefix = prefix_store(
            &dir.path().join(format!("p{k}")),
            &store,
            &rows,
            k,
            clock.clone(),
        )
        .await;
        let d = deps(prefix.clone(), clock.clone());
        let first = resume(&d, &RiderConfig::default(), "r1", "crash")
            .await
            .expect("the prefix resumes");
        let out = until_ended(&d, &clock, first).await;
        assert_eq!(
            (out.status, &out.output, out.error.as_ref().map(|e| &e.code)),
            (
                whole.status,
                &whole.output,
                whole.error.as_ref().map(|e| &e.code)
            ),
            "the run resumed after event {k} ended otherwise\n{source}"
        );
        let got = normalized(&journal(prefix.as_ref(), "r1"));
        assert_eq!(
            got,
            expected,
            "the run resumed after event {k} of {} recorded other events\n{source}",
            rows.len()
        );
    }
}

/// What a generated step is, for the steps after it to read it correctly.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// An int.
    Int,
    /// A list of ints.
    List,
    /// Maybe skipped: an int or null.
    MaybeInt,
    /// Nothing to read (a sleep, a signal, a fetch).
    Opaque,
}

/// An int expression reading step `j`, or a constant when it cannot be read as one.
fn read(j: usize, kind: Kind) -> String {
    match kind {
        Kind::Int => format!("s{j}"),
        Kind::List => format!("len(s{j})"),
        Kind::MaybeInt => format!("(s{j} ?? 0)"),
        Kind::Opaque => "1".into(),
    }
}

/// A valid flow of `shapes.len()` steps: each shape picks a step form and the earlier steps it
/// reads (`a`, `b` taken modulo the steps before it).
fn flow_source(shapes: &[(u8, usize, usize, u8)]) -> String {
    let mut kinds: Vec<Kind> = Vec::new();
    let mut s = String::from("flow t {\n");
    let mut signal = false;
    for (i, &(form, a, b, n)) in shapes.iter().enumerate() {
        let dep = |x: usize| (i > 0).then(|| x % i);
        let arg = match (dep(a), dep(b)) {
            (Some(x), Some(y)) => format!("{} + {}", read(x, kinds[x]), read(y, kinds[y])),
            (Some(x), None) | (None, Some(x)) => read(x, kinds[x]),
            (None, None) => format!("{n}"),
        };
        let after = dep(a).map_or(String::new(), |x| format!("\n    after: [s{x}]"));
        let (text, kind) = match form % 8 {
            0 => (format!("echo {{ value: {arg} + {n} }}"), Kind::Int),
            1 => (format!("{arg} * 2"), Kind::Int),
            2 => (
                format!(
                    "echo {{\n    foreach: range({})\n    concurrency: {}\n    value: item + {arg}\n  }}",
                    n % 4 + 1,
                    n % 3 + 1
                ),
                Kind::List,
            ),
            3 => (
                format!(
                    "http.get {{\n    url: \"http://fake/fail-until/{}\"\n    retry: {{ max: 4, backoff: \"exp\", base: 100ms, jitter: true }}{after}\n  }}",
                    (n as i64 % 3) * 150
                ),
                Kind::Opaque,
            ),
            4 => (
                format!(
                    "sleep {{\n    for: {}ms{after}\n  }}",
                    100 + 50 * (n as i64 % 4)
                ),
                Kind::Opaque,
            ),
            5 => (
                format!(
                    "echo {{\n    when: {arg} % 2 == {}\n    value: {arg}\n  }}",
                    n % 2
                ),
                Kind::MaybeInt,
            ),
            6 if !signal => {
                signal = true;
                (
                    format!("signal {{\n    name: \"go\"{after}\n  }}"),
                    Kind::Opaque,
                )
            }
            _ => (format!("echo {{ value: {arg} }}"), Kind::Int),
        };
        s.push_str(&format!("  step s{i} = {text}\n"));
        kinds.push(kind);
    }
    let read_last = (0..kinds.len())
        .rev()
        .find(|&j| kinds[j] != Kind::Opaque)
        .map_or("0".to_string(), |j| read(j, kinds[j]));
    s.push_str(&format!(
        "  output {{ last: {read_last}, steps: {} }}\n}}\n",
        kinds.len()
    ));
    s
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(f)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn resuming_from_any_prefix_ends_as_the_whole_run(
        shapes in proptest::collection::vec((0u8..8, 0usize..8, 0usize..8, 0u8..12), 1..6),
        durable in any::<bool>(),
    ) {
        let durability = if durable { Durability::Durable } else { Durability::Fast };
        block_on(check(&flow_source(&shapes), durability));
    }
}

/// Every example flow of the repository, as users write them, with the fakes answering their
/// tools: a run resumed from any prefix of its journal ends as the whole run.
#[test]
fn resuming_every_example_from_any_prefix_ends_as_the_whole_run() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut files: Vec<_> = [root.clone(), root.join("reference")]
        .iter()
        .flat_map(|dir| std::fs::read_dir(dir).expect("the examples are readable"))
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "reel"))
        .collect();
    files.sort();
    assert!(files.len() >= 7, "the examples are there: {files:?}");
    for file in files {
        let source = std::fs::read_to_string(&file).expect("an example reads");
        let mut inputs = serde_json::Map::new();
        match file.file_name().and_then(|n| n.to_str()) {
            Some("approval.reel") => {
                inputs.insert("request".into(), json!("a day off"));
            }
            Some("files.reel") => {
                inputs.insert("files".into(), json!(["a.txt", "b.txt"]));
            }
            _ => {}
        }
        for durability in [Durability::Fast, Durability::Durable] {
            block_on(check_with(&source, durability, inputs.clone()));
        }
    }
}
