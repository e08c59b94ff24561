//! `lsp-bench`: the language server's latency as an editor feels it, through the real `reel lsp`
//! binary over stdio: from a one-character edit to the diagnostics published for it, on generated
//! files of 1,000 and 10,000 steps; and inlay hints, code lenses and the run picker's list with
//! 1,000 past runs of the open flow in the store.
//!
//! Everything goes through JSON-RPC as an editor sends it (incremental `didChange`s of one
//! character, as VS Code sends them), so the figures include framing, JSON and the server's
//! scheduling, not only the compiler.
//!
//! `--only typing` drives the server as VS Code does while a new step is typed key by key into a
//! generated flow of 1,000, 3,000 and 10,000 steps: after each `didChange` the requests VS Code
//! sends (semantic tokens as a full/delta from the list asked for at open, as VS Code does, and
//! a range request, code lenses, folding ranges,
//! document symbols, inlay hints for the visible range, completion at the cursor and code
//! actions), the unanswered ones cancelled (`$/cancelRequest`) when the next key comes; then
//! each request alone on the quiet file. It prints p50/p95 per request and the time from the
//! last key to the diagnostics of the last version.
//!
//! `--only json` splits the two biggest answers (document symbols, full semantic tokens) in
//! process, without the server: computing them on a checked database, then the JSON, as
//! tower-lsp-server makes it (`serde_json::to_value`, then the text).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use clap::Parser;
use reel_bench::generate::{Edit, TYPED_STEP as TYPED, generate};
use reel_bench::measure::{Stats, reel_binary, show};
use reel_lsp::wire::{read_frame, write_message};
use serde_json::{Value, json};

/// The language server benchmark.
#[derive(Parser)]
struct Args {
    /// The `reel` binary (default: beside this one).
    #[arg(long)]
    reel: Option<PathBuf>,
    /// Flow sizes (steps) for the edit-to-diagnostics measurement.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    sizes: Vec<usize>,
    /// One-character edits timed per size (each followed by its undo, also timed).
    #[arg(long, default_value_t = 100)]
    edits: usize,
    /// Past runs in the store for the inlay hint measurement.
    #[arg(long, default_value_t = 1000)]
    runs: usize,
    /// Inlay hint requests timed.
    #[arg(long, default_value_t = 200)]
    requests: usize,
    /// Flow sizes (steps) for the typing and request measurements.
    #[arg(long, value_delimiter = ',', default_value = "1000,3000,10000")]
    typing_sizes: Vec<usize>,
    /// Milliseconds between two keys while typing.
    #[arg(long, default_value_t = 60)]
    key_ms: u64,
    /// Times each request is sent alone on the quiet file.
    #[arg(long, default_value_t = 30)]
    alone: usize,
    /// One part only: `edits`, `runs` or `typing` (default: all three).
    #[arg(long)]
    only: Option<String>,
}

fn main() {
    // Allocate as `reel` does (see `reel_alloc`).
    reel_bench::reel_alloc::tune();
    let args = Args::parse();
    let reel = reel_binary(args.reel.as_deref()).unwrap_or_else(|e| {
        eprintln!("lsp-bench: {e}");
        std::process::exit(2);
    });
    let part = |name: &str| args.only.as_deref().is_none_or(|o| o == name);
    if part("edits") {
        println!("## reel lsp: edit to diagnostics\n");
        println!(
            "| steps | source | open → diagnostics | edit → diagnostics: median | p95 | min | edits |"
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|");
        for &steps in &args.sizes {
            edit_to_diagnostics(&reel, steps, args.edits);
        }
    }
    if part("runs") {
        println!("\n## reel lsp: past runs\n");
        past_runs(&reel, args.runs, args.requests);
    }
    if args.only.as_deref() == Some("json") {
        println!("## reel lsp: the biggest answers, computed and then made JSON (in process)\n");
        println!("| steps | answer | compute | to_value | to text | bytes |");
        println!("|---:|---|---:|---:|---:|---:|");
        for &steps in &args.typing_sizes {
            json_costs(steps, args.alone.max(3));
        }
        return;
    }
    if part("typing") {
        println!("\n## reel lsp: typing a step with VS Code's requests, and each request alone\n");
        println!(
            "A new step (`{TYPED}`) typed key by key, {} ms apart, each key followed by VS Code's requests; the unanswered ones cancelled at the next key.\n",
            args.key_ms
        );
        for &steps in &args.typing_sizes {
            typing(&reel, steps, Duration::from_millis(args.key_ms), args.alone);
        }
    }
}

/// Opens a generated flow of `steps` steps and times one-character edits to their diagnostics.
fn edit_to_diagnostics(reel: &Path, steps: usize, edits: usize) {
    let generated = generate(steps, 1);
    let tmp = tempdir();
    let dir = tmp.path().canonicalize().expect("the directory exists");
    let path = dir.join("pipeline.reel");
    std::fs::write(&path, &generated.text).expect("the flow is written");
    let uri = file_uri(&path);
    let mut server = Server::start(reel, &dir);
    let began = Instant::now();
    server.open(&uri, &generated.text);
    let opened = server.diagnostics(&uri, 1);
    assert!(
        opened.is_empty(),
        "the generated flow must check clean: {opened:?}"
    );
    let open_time = began.elapsed();
    let (insert, delete) = one_character(&generated.text, &generated.literal_edit);
    let mut samples = Vec::with_capacity(edits * 2);
    // Two untimed round trips first, so both versions have been seen.
    for i in 0..(edits + 2) * 2 {
        let version = i as i32 + 2;
        let change = if i % 2 == 0 { &insert } else { &delete };
        let began = Instant::now();
        server.change(&uri, version, change.clone());
        let diags = server.diagnostics(&uri, version);
        let took = began.elapsed();
        assert!(
            diags.is_empty(),
            "a literal edit keeps the file clean: {diags:?}"
        );
        if i >= 4 {
            samples.push(took);
        }
    }
    let stats = Stats::of(&samples);
    println!(
        "| {steps} | {:.0} KiB | {} | {} | {} | {} | {} |",
        generated.text.len() as f64 / 1024.0,
        show(open_time),
        show(stats.median),
        show(stats.p95),
        show(stats.min),
        stats.count,
    );
    server.stop();
}

/// The `didChange` content changes that insert the edit's extra character and take it out again.
fn one_character(text: &str, edit: &Edit) -> (Value, Value) {
    assert!(
        edit.variant.len() == edit.original.len() + 1 && edit.variant.starts_with(&edit.original),
        "the literal edit adds one character at its end"
    );
    let at = edit.at + edit.original.len();
    let line = text[..at].matches('\n').count();
    let column = text[..at]
        .rsplit('\n')
        .next()
        .unwrap_or("")
        .encode_utf16()
        .count();
    let extra = &edit.variant[edit.original.len()..];
    let pos = json!({ "line": line, "character": column });
    let after = json!({ "line": line, "character": column + 1 });
    (
        json!({ "range": { "start": pos, "end": pos }, "text": extra }),
        json!({ "range": { "start": pos, "end": after }, "text": "" }),
    )
}

/// A small flow, run `runs` times with `reel run`, then inlay hints, code lenses and the picker's
/// list of runs timed against that store.
fn past_runs(reel: &Path, runs: usize, requests: usize) {
    let tmp = tempdir();
    let dir = tmp.path().canonicalize().expect("the directory exists");
    let path = dir.join("hinted.reel");
    std::fs::write(&path, HINTED).expect("the flow is written");
    let began = Instant::now();
    for i in 0..runs {
        let out = Command::new(reel)
            .args(["run", "hinted.reel", "--input"])
            .arg(format!("n={i}"))
            .current_dir(&dir)
            .env("REEL_HOME", dir.join("store"))
            .output()
            .expect("reel run starts");
        assert!(
            out.status.success(),
            "reel run: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    println!(
        "{runs} runs of a {}-step flow made with `reel run` in {}.\n",
        HINTED.matches("step ").count(),
        show(began.elapsed())
    );
    let uri = file_uri(&path);
    let mut server = Server::start(reel, &dir);
    server.open(&uri, HINTED);
    server.diagnostics(&uri, 1);
    let last = runs.saturating_sub(1);
    println!("| request | median | p95 | min | requests |");
    println!("|---|---:|---:|---:|---:|");
    let whole =
        json!({ "start": { "line": 0, "character": 0 }, "end": { "line": 200, "character": 0 } });
    let hints = timed(requests, || {
        let r = server.request(
            "textDocument/inlayHint",
            json!({ "textDocument": { "uri": uri }, "range": whole }),
        );
        let hints = r["result"].as_array().map_or(0, Vec::len);
        assert_eq!(hints, 8, "every step has its hint: {r}");
        let first = r["result"][0]["label"].as_str().unwrap_or_default();
        assert!(
            first.contains(&format!("{last}")),
            "the latest run is shown: {r}"
        );
    });
    row(
        &format!("inlay hints (8 steps, latest of {runs} runs)"),
        &hints,
    );
    let lenses = timed(requests, || {
        let r = server.request(
            "textDocument/codeLens",
            json!({ "textDocument": { "uri": uri } }),
        );
        assert_eq!(r["result"].as_array().map_or(0, Vec::len), 3, "{r}");
    });
    row("code lenses", &lenses);
    let listed = timed(requests, || {
        let r = server.request(
            "workspace/executeCommand",
            json!({ "command": "reel.server.listRuns", "arguments": [uri, "hinted"] }),
        );
        assert_eq!(
            r["result"].as_array().map_or(0, Vec::len),
            50.min(runs),
            "{r}"
        );
    });
    row("run picker's list (50 newest)", &listed);
    server.stop();
}

/// The flow the past-runs measurement runs and shows: eight steps, one per line with a hint.
const HINTED: &str = r#"flow hinted {
  input n: int = 0

  step a = echo {
    value: { n: input.n, label: "run ${input.n}" }
  }
  step b = a.n * 2
  step c = echo {
    value: [a.n, b]
  }
  step d = len(c)
  step e = echo {
    value: { total: b + d, tags: ["x", "y"] }
  }
  step f = if e.total > 10 then "big" else "small"
  step g = echo {
    value: f
  }
  step h = "${g}: ${a.label}"

  output h
}
"#;

fn timed(n: usize, mut f: impl FnMut()) -> Stats {
    f();
    let samples: Vec<Duration> = (0..n)
        .map(|_| {
            let began = Instant::now();
            f();
            began.elapsed()
        })
        .collect();
    Stats::of(&samples)
}

fn row(what: &str, s: &Stats) {
    println!(
        "| {what} | {} | {} | {} | {} |",
        show(s.median),
        show(s.p95),
        show(s.min),
        s.count
    );
}

/// One request of the mix: its row name, method and parameters.
type Request = (&'static str, &'static str, Value);

/// What one kind of request did: latencies of its answers, and how many were cancelled or failed.
#[derive(Default)]
struct Tally {
    answered: Vec<Duration>,
    cancelled: usize,
    failed: usize,
    unsupported: bool,
}

impl Tally {
    fn add(&mut self, took: Duration, answer: &Value) {
        match answer["error"]["code"].as_i64() {
            None => self.answered.push(took),
            // RequestCancelled, ContentModified: the server stopped the request.
            Some(-32800 | -32801) => self.cancelled += 1,
            Some(-32601) => self.unsupported = true,
            Some(_) => self.failed += 1,
        }
    }

    fn p50_p95(&self) -> (String, String) {
        if self.unsupported && self.answered.is_empty() {
            return ("unsupported".into(), "—".into());
        }
        if self.answered.is_empty() {
            return ("—".into(), "—".into());
        }
        let s = Stats::of(&self.answered);
        (show(s.median), show(s.p95))
    }
}

/// The requests VS Code sends after a change: semantic tokens (a delta when it has a result id,
/// and the visible range), code lenses, folding ranges, symbols, hints for the visible range,
/// completion at the cursor and code actions there.
fn vscode_mix(uri: &str, cursor: Value, visible: &Value, tokens_id: Option<&str>) -> Vec<Request> {
    let doc = json!({ "uri": uri });
    let tokens = match tokens_id {
        Some(id) => (
            "semantic tokens, full/delta",
            "textDocument/semanticTokens/full/delta",
            json!({ "textDocument": doc, "previousResultId": id }),
        ),
        None => (
            "semantic tokens, full",
            "textDocument/semanticTokens/full",
            json!({ "textDocument": doc }),
        ),
    };
    vec![
        tokens,
        (
            "semantic tokens, range",
            "textDocument/semanticTokens/range",
            json!({ "textDocument": doc, "range": visible }),
        ),
        (
            "code lenses",
            "textDocument/codeLens",
            json!({ "textDocument": doc }),
        ),
        (
            "folding ranges",
            "textDocument/foldingRange",
            json!({ "textDocument": doc }),
        ),
        (
            "document symbols",
            "textDocument/documentSymbol",
            json!({ "textDocument": doc }),
        ),
        (
            "inlay hints (visible)",
            "textDocument/inlayHint",
            json!({ "textDocument": doc, "range": visible }),
        ),
        (
            "completion",
            "textDocument/completion",
            json!({ "textDocument": doc, "position": cursor }),
        ),
        (
            "code actions",
            "textDocument/codeAction",
            json!({ "textDocument": doc, "range": { "start": cursor, "end": cursor },
                    "context": { "diagnostics": [] } }),
        ),
    ]
}

/// The line and UTF-16 column of byte `at` of `text`, as an LSP position.
fn position_of(text: &str, at: usize) -> Value {
    let line = text[..at].matches('\n').count();
    let column = text[..at]
        .rsplit('\n')
        .next()
        .unwrap_or("")
        .encode_utf16()
        .count();
    json!({ "line": line, "character": column })
}

/// Types [`TYPED`] into a generated flow of `steps` steps with VS Code's requests after each
/// key, then sends each request alone; prints one table.
fn typing(reel: &Path, steps: usize, key: Duration, alone: usize) {
    let generated = generate(steps, 1);
    let text = generated.text.clone();
    let tmp = tempdir();
    let dir = tmp.path().canonicalize().expect("the directory exists");
    let path = dir.join("pipeline.reel");
    std::fs::write(&path, &text).expect("the flow is written");
    let uri = file_uri(&path);
    let mut server = Server::start(reel, &dir);
    server.open(&uri, &text);
    server.diagnostics(&uri, 1);
    // The new step goes on a blank line in the middle of the flow, between two steps.
    let blank = generated.typing_point();
    let line = text[..blank].matches('\n').count();
    let visible = json!({ "start": { "line": line.saturating_sub(30), "character": 0 },
                          "end": { "line": line + 30, "character": 0 } });
    let mut tallies: BTreeMap<&'static str, Tally> = BTreeMap::new();
    let mut pending: HashMap<i64, (&'static str, Instant)> = HashMap::new();
    let mut published: Vec<(i64, Instant)> = Vec::new();
    // VS Code asks for the whole token list when the document opens, and for deltas from that
    // answer after each change: the first key's request is a delta too.
    let opened = server.request(
        "textDocument/semanticTokens/full",
        json!({ "textDocument": { "uri": uri } }),
    );
    let mut tokens_id: Option<String> = opened["result"]["resultId"].as_str().map(str::to_string);
    let mut asked_to_cancel = std::collections::HashSet::new();
    let mut version = 1;
    let mut last_key = Instant::now();
    for (column, ch) in TYPED.chars().enumerate() {
        // The requests of the last key still unanswered are stale now: VS Code cancels them.
        for id in pending.keys() {
            if asked_to_cancel.insert(*id) {
                server.notify("$/cancelRequest", json!({ "id": id }));
            }
        }
        version += 1;
        let at = json!({ "line": line, "character": column });
        server.change(
            &uri,
            version,
            json!({ "range": { "start": at, "end": at }, "text": ch.to_string() }),
        );
        last_key = Instant::now();
        let cursor = json!({ "line": line, "character": column + 1 });
        for (name, method, params) in vscode_mix(&uri, cursor, &visible, tokens_id.as_deref()) {
            let id = server.send_request(method, params);
            pending.insert(id, (name, Instant::now()));
        }
        let next = last_key + key;
        while let Some((at, m)) = server.receive_until(next) {
            note(
                at,
                &m,
                &uri,
                &mut pending,
                &mut tallies,
                &mut published,
                &mut tokens_id,
            );
        }
    }
    // After the last key: its diagnostics, and the answers to its requests.
    let deadline = Instant::now() + Duration::from_secs(120);
    // The last version's diagnostics may have come before its key's window ended.
    let mut last_diagnostics = published
        .iter()
        .find(|(v, _)| *v == version as i64)
        .map(|(_, at)| *at - last_key);
    while (last_diagnostics.is_none() || !pending.is_empty()) && Instant::now() < deadline {
        let Some((at, m)) = server.receive_until(deadline) else {
            break;
        };
        if m["method"] == "textDocument/publishDiagnostics"
            && m["params"]["version"] == json!(version)
            && last_diagnostics.is_none()
        {
            last_diagnostics = Some(at - last_key);
        }
        note(
            at,
            &m,
            &uri,
            &mut pending,
            &mut tallies,
            &mut published,
            &mut tokens_id,
        );
    }
    let stale = published
        .iter()
        .filter(|(v, at)| *v < version as i64 && *at > last_key)
        .count();
    let keys = TYPED.chars().count();
    // Each request alone, on the quiet file with the typed step in it: a second after the
    // typing, as someone who stopped typing and then points at something. (The server warms
    // what hover, definition and references read once no key has come for 300 ms; one sent
    // sooner after a key assembles it itself: docs/architecture.md.)
    std::thread::sleep(Duration::from_secs(1));
    let typed_text = generated.typed(TYPED.chars().count());
    let alone_tallies = each_alone(&mut server, &uri, &typed_text, blank, &visible, alone);
    println!(
        "### {steps} steps ({:.0} KiB): last key → its diagnostics {}; {} publishes for {} keys, {stale} of an older version after the last key\n",
        typed_text.len() as f64 / 1024.0,
        last_diagnostics.map_or("never (2 min)".to_string(), show),
        published.len(),
        keys,
    );
    println!("| request | typing: p50 | p95 | answered | cancelled | alone: p50 | p95 |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let names: std::collections::BTreeSet<&str> = tallies
        .keys()
        .chain(alone_tallies.keys())
        .copied()
        .collect();
    let empty = Tally::default();
    for name in names {
        let t = tallies.get(name).unwrap_or(&empty);
        let a = alone_tallies.get(name).unwrap_or(&empty);
        let ((t50, t95), (a50, a95)) = (t.p50_p95(), a.p50_p95());
        let (answered, cancelled) = if tallies.contains_key(name) {
            (t.answered.len().to_string(), t.cancelled.to_string())
        } else {
            ("—".into(), "—".into())
        };
        println!("| {name} | {t50} | {t95} | {answered} | {cancelled} | {a50} | {a95} |");
    }
    println!();
    server.stop();
}

/// Records one message of the typing measurement: an answer (with its latency), or a publish.
fn note(
    at: Instant,
    m: &Value,
    uri: &str,
    pending: &mut HashMap<i64, (&'static str, Instant)>,
    tallies: &mut BTreeMap<&'static str, Tally>,
    published: &mut Vec<(i64, Instant)>,
    tokens_id: &mut Option<String>,
) {
    if m["method"] == "textDocument/publishDiagnostics" && m["params"]["uri"] == uri {
        published.push((
            m["params"]["version"].as_i64().unwrap_or(-1),
            Instant::now(),
        ));
        return;
    }
    let Some(id) = m["id"].as_i64() else { return };
    if m.get("method").is_some() {
        return;
    }
    let Some((name, sent)) = pending.remove(&id) else {
        return;
    };
    tallies.entry(name).or_default().add(at - sent, m);
    if let Some(result_id) = m["result"]["resultId"].as_str() {
        *tokens_id = Some(result_id.to_string());
    }
}

/// Each request alone, `n` times in a row, on the quiet file: the mix's, and hover, definition,
/// references, rename and signature help on the hub step (the one many later steps read).
fn each_alone(
    server: &mut Server,
    uri: &str,
    text: &str,
    typed_at: usize,
    visible: &Value,
    n: usize,
) -> BTreeMap<&'static str, Tally> {
    let doc = json!({ "uri": uri });
    let typed_end = position_of(text, typed_at + TYPED.len());
    // The step after the typed one reads the hub: its name, declared and then read below.
    let hub_decl = text[typed_at..]
        .find("step quota")
        .or_else(|| text[typed_at..].find("step "))
        .map(|i| typed_at + i + "step ".len())
        .expect("a step follows the typed one");
    let hub: String = text[hub_decl..]
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    let after = hub_decl + hub.len();
    let read = text[after..]
        .match_indices(hub.as_str())
        .map(|(i, _)| after + i)
        .find(|&i| {
            let word = |c: char| c.is_alphanumeric() || c == '_';
            !text[..i].ends_with(word) && !text[i + hub.len()..].starts_with(word)
        })
        .unwrap_or(hub_decl);
    let reference = position_of(text, read + 1);
    let call = typed_at + TYPED.find("len(").expect("the typed step calls len") + 4;
    let mut requests = vec![
        (
            "hover",
            "textDocument/hover",
            json!({ "textDocument": doc, "position": reference }),
        ),
        (
            "definition",
            "textDocument/definition",
            json!({ "textDocument": doc, "position": reference }),
        ),
        (
            "references",
            "textDocument/references",
            json!({ "textDocument": doc, "position": reference,
                    "context": { "includeDeclaration": true } }),
        ),
        (
            "rename",
            "textDocument/rename",
            json!({ "textDocument": doc, "position": reference, "newName": "renamed" }),
        ),
        (
            "signature help",
            "textDocument/signatureHelp",
            json!({ "textDocument": doc, "position": position_of(text, call) }),
        ),
    ];
    requests.extend(vscode_mix(uri, typed_end.clone(), visible, None));
    let mut tallies: BTreeMap<&'static str, Tally> = BTreeMap::new();
    let mut tokens_id = None;
    for (name, method, params) in requests {
        let tally = tallies.entry(name).or_default();
        for _ in 0..n {
            let began = Instant::now();
            let (at, answer) = server.request_stamped(method, params.clone());
            tally.add(at - began, &answer);
            if let Some(id) = answer["result"]["resultId"].as_str() {
                tokens_id = Some(id.to_string());
            }
        }
    }
    // A delta against the last result (nothing changed since: the smallest answer), each
    // against the one before, as an editor asks.
    if let Some(mut id) = tokens_id {
        let tally = tallies.entry("semantic tokens, full/delta").or_default();
        for _ in 0..n {
            let began = Instant::now();
            let (at, answer) = server.request_stamped(
                "textDocument/semanticTokens/full/delta",
                json!({ "textDocument": doc, "previousResultId": id }),
            );
            tally.add(at - began, &answer);
            if let Some(next) = answer["result"]["resultId"].as_str() {
                id = next.to_string();
            }
        }
    }
    tallies
}

/// A fresh directory that is removed when dropped (canonical, as runs record their source).
fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("reel-lsp-bench-")
        .tempdir()
        .expect("a temporary directory")
}

fn file_uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// `reel lsp` as a child process, spoken to as an editor does.
struct Server {
    child: Child,
    stdin: ChildStdin,
    /// The server's messages with when they arrived (stamped on a thread of their own, so
    /// that a busy driver does not make them look late).
    incoming: Receiver<(Instant, Value)>,
    next_id: i64,
}

impl Server {
    fn start(reel: &Path, dir: &Path) -> Server {
        let mut child = Command::new(reel)
            .arg("lsp")
            .current_dir(dir)
            .env("REEL_HOME", dir.join("store"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("reel lsp starts");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let (stamp, stamped) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
        let (parsed, incoming) = std::sync::mpsc::channel();
        // Stamped when the last byte is in, on a thread that does nothing else, and parsed on
        // another: neither a big answer nor the answers behind it (already in the pipe while
        // this client parses the big one) are made to look later by the benchmark's parser.
        std::thread::spawn(move || {
            let mut reader = std::io::BufReader::new(stdout);
            while let Some(body) = read_frame(&mut reader) {
                if stamp.send((Instant::now(), body)).is_err() {
                    break;
                }
            }
        });
        std::thread::spawn(move || {
            for (at, body) in stamped {
                let Ok(m) = serde_json::from_slice::<Value>(&body) else {
                    break;
                };
                if parsed.send((at, m)).is_err() {
                    break;
                }
            }
        });
        let mut server = Server {
            child,
            stdin,
            incoming,
            next_id: 0,
        };
        let capabilities =
            json!({ "textDocument": { "publishDiagnostics": { "versionSupport": true } } });
        let init = server.request(
            "initialize",
            json!({ "processId": null, "rootUri": null, "capabilities": capabilities }),
        );
        assert!(init.get("result").is_some(), "initialize: {init}");
        let sync = &init["result"]["capabilities"]["textDocumentSync"];
        assert!(
            sync == &json!(2) || sync["change"] == json!(2),
            "the server must take incremental changes: {sync}"
        );
        server.notify("initialized", json!({}));
        server
    }

    fn send(&mut self, message: Value) {
        write_message(&mut self.stdin, &message).expect("the server reads its input");
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({ "jsonrpc": "2.0", "method": method, "params": params }));
    }

    /// Sends a request without waiting for its answer; returns its id.
    fn send_request(&mut self, method: &str, params: Value) -> i64 {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        id
    }

    /// The next message and when it arrived, if one comes before `deadline` (requests from
    /// the server are answered).
    fn receive_until(&mut self, deadline: Instant) -> Option<(Instant, Value)> {
        let wait = deadline.saturating_duration_since(Instant::now());
        let (at, m) = self.incoming.recv_timeout(wait).ok()?;
        if m.get("method").is_some() && m.get("id").is_some() {
            let id = m["id"].clone();
            self.send(json!({ "jsonrpc": "2.0", "id": id, "result": null }));
        }
        Some((at, m))
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.request_stamped(method, params).1
    }

    /// A request's answer, and when its last byte arrived.
    fn request_stamped(&mut self, method: &str, params: Value) -> (Instant, Value) {
        let id = self.send_request(method, params);
        loop {
            let (at, m) = self.receive(method);
            if m["id"] == json!(id) && m.get("method").is_none() {
                return (at, m);
            }
        }
    }

    fn receive(&mut self, waiting_for: &str) -> (Instant, Value) {
        let (at, m) = self
            .incoming
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("no answer to `{waiting_for}`: {e}"));
        if m.get("method").is_some() && m.get("id").is_some() {
            let id = m["id"].clone();
            self.send(json!({ "jsonrpc": "2.0", "id": id, "result": null }));
        }
        (at, m)
    }

    fn open(&mut self, uri: &str, text: &str) {
        self.notify(
            "textDocument/didOpen",
            json!({ "textDocument": { "uri": uri, "languageId": "reel", "version": 1, "text": text } }),
        );
    }

    fn change(&mut self, uri: &str, version: i32, change: Value) {
        self.notify(
            "textDocument/didChange",
            json!({ "textDocument": { "uri": uri, "version": version }, "contentChanges": [change] }),
        );
    }

    /// Waits for the diagnostics published for `version` of `uri`.
    fn diagnostics(&mut self, uri: &str, version: i32) -> Vec<Value> {
        loop {
            let (_, m) = self.receive("textDocument/publishDiagnostics");
            if m["method"] == "textDocument/publishDiagnostics"
                && m["params"]["uri"] == uri
                && m["params"]["version"] == json!(version)
            {
                return m["params"]["diagnostics"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
            }
        }
    }

    fn stop(mut self) {
        let _ = self.request("shutdown", Value::Null);
        self.notify("exit", Value::Null);
        let _ = self.child.wait();
    }
}

/// Times computing document symbols and the full semantic tokens on a checked database, and
/// making each JSON as the server's library does (a `Value`, then its text): medians of `n`.
fn json_costs(steps: usize, n: usize) {
    use reel_compiler::{RootDb, SourceFile, file_diagnostics};
    use reel_lsp::ide::{Ctx, outline, tokens};
    use tower_lsp_server::lsp_types::SemanticTokens;
    let text = generate(steps, 1).text;
    let db = RootDb::default();
    let file = SourceFile::new(
        &db,
        "pipeline.reel".into(),
        "/tmp".into(),
        text.as_str().into(),
    );
    let _ = file_diagnostics(&db, file);
    let cx = Ctx::new(&db, file);
    /// Medians of the three stages and the text's size.
    #[derive(Default)]
    struct Stages {
        compute: Vec<Duration>,
        value: Vec<Duration>,
        text: Vec<Duration>,
        bytes: usize,
    }
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let print = |name: &str, st: Stages| {
        println!(
            "| {steps} | {name} | {} | {} | {} | {:.0} KiB |",
            show(median(st.compute)),
            show(median(st.value)),
            show(median(st.text)),
            st.bytes as f64 / 1024.0
        );
    };
    macro_rules! stages {
        ($compute:expr) => {{
            let mut st = Stages::default();
            for _ in 0..n {
                let began = Instant::now();
                let answer = $compute;
                st.compute.push(began.elapsed());
                let began = Instant::now();
                let value = serde_json::to_value(&answer).expect("an LSP answer is JSON");
                st.value.push(began.elapsed());
                let began = Instant::now();
                st.bytes = value.to_string().len();
                st.text.push(began.elapsed());
            }
            st
        }};
    }
    print("document symbols", stages!(outline::document_symbols(&cx)));
    print(
        "semantic tokens, full",
        stages!(SemanticTokens {
            result_id: Some("1".into()),
            data: tokens::TokenAnswer::of(&cx).encode(),
        }),
    );
}
