//! `lsp-bench`: the language server's latency as an editor feels it, through the real `reel lsp`
//! binary over stdio: from a one-character edit to the diagnostics published for it, on generated
//! files of 1,000 and 10,000 steps; and inlay hints, code lenses and the run picker's list with
//! 1,000 past runs of the open flow in the store.
//!
//! Everything goes through JSON-RPC as an editor sends it (incremental `didChange`s of one
//! character, as VS Code sends them), so the figures include framing, JSON and the server's
//! scheduling, not only the compiler.

use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use clap::Parser;
use reel_bench::generate::{Edit, generate};
use reel_bench::measure::{Stats, show};
use reel_lsp::wire::{incoming, write_message};
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
}

fn main() {
    let args = Args::parse();
    let reel = args.reel.clone().unwrap_or_else(|| {
        std::env::current_exe()
            .expect("the benchmark knows where it is")
            .with_file_name("reel")
    });
    // Absolute: the server and `reel run` are started in the benchmark's own directories.
    let Some(reel) = reel.canonicalize().ok().filter(|p| p.is_file()) else {
        eprintln!(
            "lsp-bench: no `reel` binary at {} (build it with `cargo build --release --bin reel`, or pass --reel)",
            reel.display()
        );
        std::process::exit(2);
    };
    println!("## reel lsp: edit to diagnostics\n");
    println!(
        "| steps | source | open → diagnostics | edit → diagnostics: median | p95 | min | edits |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for &steps in &args.sizes {
        edit_to_diagnostics(&reel, steps, args.edits);
    }
    println!("\n## reel lsp: past runs\n");
    past_runs(&reel, args.runs, args.requests);
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
    incoming: Receiver<Value>,
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
        let incoming = incoming(stdout);
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

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        loop {
            let m = self.receive(method);
            if m["id"] == json!(id) && m.get("method").is_none() {
                return m;
            }
        }
    }

    fn receive(&mut self, waiting_for: &str) -> Value {
        let m = self
            .incoming
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("no answer to `{waiting_for}`: {e}"));
        if m.get("method").is_some() && m.get("id").is_some() {
            let id = m["id"].clone();
            self.send(json!({ "jsonrpc": "2.0", "id": id, "result": null }));
        }
        m
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
            let m = self.receive("textDocument/publishDiagnostics");
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
