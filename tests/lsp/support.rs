//! A small LSP client for the tests: starts `reel lsp`, frames JSON-RPC with `reel_lsp::wire`,
//! matches responses to requests by id and keeps the notifications it receives; and the one
//! convention the tests are written in.
//!
//! The convention: a fixture is a flow text with `$0` marking the cursor (`$0…$0` a range), see
//! [`Fixture`]; what the server answers is rendered as text and compared with an inline insta
//! snapshot. Places are shown in the source they point into ([`annotate`]): a line of carets
//! under the range, then its label. Edits are shown as the text after them ([`apply_edits`]).
//! Inlay hints are written into the source where they land ([`show_hints`]). What changes from
//! one run to the next (durations, ages, times, run ids) is replaced by a placeholder, and only
//! when it has the expected shape ([`redact`]), so the snapshots stay exact.

// edge: the tests wait for a real server process with deadlines, which measure real time.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use reel_lsp::wire::{incoming, write_message};
use serde_json::{Value, json};

/// How long any one answer may take before the test fails.
const TIMEOUT: Duration = Duration::from_secs(30);

/// A running `reel lsp` and what it sent that no request has consumed yet.
pub struct Client {
    child: Child,
    stdin: ChildStdin,
    incoming: Receiver<Value>,
    next_id: i64,
    /// Notifications received so far, oldest first.
    pub notifications: Vec<Value>,
    /// The server's capabilities, as `initialize` answered them.
    pub capabilities: Value,
}

impl Client {
    /// Starts `reel lsp` in `dir` with `REEL_HOME` set to `home`, and initializes it.
    pub fn start(dir: &Path, home: &Path) -> Client {
        Client::start_with(dir, home, json!({}))
    }

    /// Like [`Client::start`], announcing these client capabilities.
    pub fn start_with(dir: &Path, home: &Path, capabilities: Value) -> Client {
        Client::spawn(dir, home, capabilities, &[])
    }

    /// Like [`Client::start`], with these environment variables set too.
    pub fn start_env(dir: &Path, home: &Path, env: &[(&str, &str)]) -> Client {
        Client::spawn(dir, home, json!({}), env)
    }

    fn spawn(dir: &Path, home: &Path, capabilities: Value, env: &[(&str, &str)]) -> Client {
        let mut child = Command::new(env!("CARGO_BIN_EXE_reel"))
            .arg("lsp")
            .current_dir(dir)
            .env("REEL_HOME", home)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("reel lsp starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let incoming = incoming(stdout);
        let mut client = Client {
            child,
            stdin,
            incoming,
            next_id: 0,
            notifications: Vec::new(),
            capabilities: Value::Null,
        };
        let init = client.request(
            "initialize",
            json!({ "processId": null, "rootUri": null, "capabilities": capabilities }),
        );
        assert!(init["result"]["capabilities"].is_object(), "{init}");
        client.capabilities = init["result"]["capabilities"].clone();
        client.notify("initialized", json!({}));
        client
    }

    fn send(&mut self, message: Value) {
        write_message(&mut self.stdin, &message).expect("the server reads its input");
    }

    /// Sends a notification.
    pub fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({ "jsonrpc": "2.0", "method": method, "params": params }));
    }

    /// Sends a request and returns its whole response (`result` or `error`).
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let message = self.receive(deadline, method);
            if message["id"] == json!(id) && message.get("method").is_none() {
                return message;
            }
        }
    }

    /// The next message; server requests are answered with `null` and kept, like notifications.
    fn receive(&mut self, deadline: Instant, waiting_for: &str) -> Value {
        let left = deadline.saturating_duration_since(Instant::now());
        let message = match self.incoming.recv_timeout(left) {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => panic!("no answer to `{waiting_for}` in time"),
            Err(RecvTimeoutError::Disconnected) => {
                panic!("the server exited while `{waiting_for}`")
            }
        };
        if message.get("method").is_some() {
            if message.get("id").is_some() {
                let id = message["id"].clone();
                self.send(json!({ "jsonrpc": "2.0", "id": id, "result": null }));
            }
            self.notifications.push(message.clone());
        }
        message
    }

    /// Waits for a notification (or server request) of `method` that `accept` likes, consuming it.
    pub fn wait_for(&mut self, method: &str, accept: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(i) = self
                .notifications
                .iter()
                .position(|n| n["method"] == method && accept(&n["params"]))
            {
                return self.notifications.remove(i)["params"].clone();
            }
            self.receive(deadline, method);
        }
    }

    /// Opens a document with `text`.
    pub fn open(&mut self, uri: &str, text: &str) {
        self.notify(
            "textDocument/didOpen",
            json!({ "textDocument": { "uri": uri, "languageId": "reel", "version": 1, "text": text } }),
        );
    }

    /// Replaces a document's text (full sync).
    pub fn change(&mut self, uri: &str, version: i32, text: &str) {
        self.notify(
            "textDocument/didChange",
            json!({ "textDocument": { "uri": uri, "version": version }, "contentChanges": [{ "text": text }] }),
        );
    }

    /// Waits for the diagnostics of `uri` at `version`.
    pub fn diagnostics(&mut self, uri: &str, version: i32) -> Vec<Value> {
        let params = self.wait_for("textDocument/publishDiagnostics", |p| {
            p["uri"] == uri && p["version"] == version
        });
        params["diagnostics"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// A request at a position of `uri`, with extra parameters merged in.
    pub fn at(
        &mut self,
        method: &str,
        uri: &str,
        (line, character): (u32, u32),
        extra: Value,
    ) -> Value {
        let mut params = json!({
            "textDocument": { "uri": uri },
            "position": { "line": line, "character": character },
        });
        if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
            p.extend(e.clone());
        }
        self.request(method, params)
    }

    /// Shuts the server down and checks that it exits cleanly.
    pub fn shutdown(mut self) {
        let r = self.request("shutdown", Value::Null);
        assert!(r.get("error").is_none(), "{r}");
        self.notify("exit", Value::Null);
        let status = self.child.wait().unwrap();
        assert!(status.success(), "reel lsp exited with {status}");
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // A test that failed midway must not leave the server running.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The file URI of `path`.
pub fn uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// A flow text with its `$0` markers taken out, and where they were.
#[derive(Debug)]
pub struct Fixture {
    /// The text without markers.
    pub text: String,
    /// Each marker's place, in order, as an LSP position (0-based line, UTF-16 column).
    pub marks: Vec<(u32, u32)>,
}

impl Fixture {
    /// Parses `marked`: each `$0` is taken out and remembered. (`$0` cannot occur in Reel
    /// source: `$` is followed by `{` in an interpolation and `0` is no escape.)
    pub fn new(marked: &str) -> Fixture {
        let mut text = String::new();
        let mut marks = Vec::new();
        for (i, part) in marked.split("$0").enumerate() {
            if i > 0 {
                marks.push(position(&text, text.len()));
            }
            text.push_str(part);
        }
        Fixture { text, marks }
    }

    /// The one marker: the cursor.
    pub fn cursor(&self) -> (u32, u32) {
        assert_eq!(self.marks.len(), 1, "the fixture needs exactly one `$0`");
        self.marks[0]
    }

    /// The two markers: a range, as LSP JSON.
    pub fn range(&self) -> Value {
        assert_eq!(self.marks.len(), 2, "the fixture needs a `$0…$0` range");
        let at = |(line, character): (u32, u32)| json!({ "line": line, "character": character });
        json!({ "start": at(self.marks[0]), "end": at(self.marks[1]) })
    }
}

/// The LSP position (0-based line, UTF-16 column) of byte `offset` of `text`.
pub fn position(text: &str, offset: usize) -> (u32, u32) {
    let before = &text[..offset];
    let line = before.matches('\n').count();
    let col: usize = before[before.rfind('\n').map_or(0, |i| i + 1)..]
        .chars()
        .map(char::len_utf16)
        .sum();
    (line as u32, col as u32)
}

/// The byte offset of an LSP position in `text` (clamped to its line and to the text).
fn offset(text: &str, pos: &Value) -> usize {
    let line = pos["line"].as_u64().expect("a line") as usize;
    let character = pos["character"].as_u64().expect("a character") as usize;
    let start: usize = text.split_inclusive('\n').take(line).map(str::len).sum();
    let rest = &text[start.min(text.len())..];
    let mut units = 0;
    for (i, c) in rest.char_indices() {
        if units >= character || c == '\n' {
            return start + i;
        }
        units += c.len_utf16();
    }
    text.len()
}

/// `text` with each `(range, label)` shown under the line where it starts: carets under the
/// range (to the end of that line when it goes on), then the label.
pub fn annotate(text: &str, places: &[(Value, String)]) -> String {
    let mut out = String::new();
    let mut line_start = 0;
    for (n, line) in text.split_inclusive('\n').enumerate() {
        out.push_str(line.trim_end_matches('\n'));
        out.push('\n');
        let line_end = line_start + line.trim_end_matches('\n').len();
        for (range, label) in places {
            if range["start"]["line"].as_u64() != Some(n as u64) {
                continue;
            }
            let a = offset(text, &range["start"]).clamp(line_start, line_end);
            let b = offset(text, &range["end"]).clamp(a, line_end);
            let pad = text[line_start..a].chars().count();
            let width = text[a..b].chars().count().max(1);
            // A label of several lines goes on aligned under its first.
            let indent = format!("\n{}", " ".repeat(pad + width + 1));
            let label = if label.is_empty() {
                String::new()
            } else {
                format!(" {}", label.replace('\n', &indent))
            };
            out.push_str(&format!(
                "{}{}{label}\n",
                " ".repeat(pad),
                "^".repeat(width)
            ));
        }
        line_start += line.len();
    }
    out
}

/// Diagnostics shown in the source: `code severity: message` under each.
pub fn show_diagnostics(text: &str, diagnostics: &[Value]) -> String {
    let places: Vec<(Value, String)> = diagnostics
        .iter()
        .map(|d| {
            let severity = match d["severity"].as_u64() {
                Some(1) => "error",
                Some(2) => "warning",
                _ => "other",
            };
            let code = d["code"].as_str().unwrap_or("-");
            let message = d["message"].as_str().unwrap_or_default();
            (d["range"].clone(), format!("{code} {severity}: {message}"))
        })
        .collect();
    annotate(text, &places)
}

/// Locations of `uri` (a `Location`, a list of them, or `LocationLink`s) shown in the source.
pub fn show_locations(text: &str, uri: &str, result: &Value) -> String {
    let all = match result {
        Value::Array(items) => items.clone(),
        Value::Null => Vec::new(),
        one => vec![one.clone()],
    };
    let places: Vec<(Value, String)> = all
        .iter()
        .map(|l| {
            let (target, range) = match l.get("targetUri") {
                Some(target) => (target, &l["targetSelectionRange"]),
                None => (&l["uri"], &l["range"]),
            };
            assert_eq!(target, uri, "a location in another file: {l}");
            (range.clone(), String::new())
        })
        .collect();
    annotate(text, &places)
}

/// `text` after the LSP `TextEdit`s `edits` (ranges in the original text).
pub fn apply_edits(text: &str, edits: &Value) -> String {
    let mut edits: Vec<(usize, usize, &str)> = edits
        .as_array()
        .unwrap_or_else(|| panic!("a list of edits: {edits}"))
        .iter()
        .map(|e| {
            (
                offset(text, &e["range"]["start"]),
                offset(text, &e["range"]["end"]),
                e["newText"].as_str().expect("newText"),
            )
        })
        .collect();
    edits.sort_by_key(|(a, b, _)| std::cmp::Reverse((*a, *b)));
    let mut out = text.to_string();
    for (a, b, new) in edits {
        out.replace_range(a..b, new);
    }
    out
}

/// `text` with each inlay hint written in where it lands, as `⟨label⟩` (after a space when the
/// hint asks for padding), its label redacted.
pub fn show_hints(text: &str, hints: &Value) -> String {
    let mut at: Vec<(usize, String)> = hints
        .as_array()
        .unwrap_or_else(|| panic!("a list of hints: {hints}"))
        .iter()
        .map(|h| {
            let label = h["label"].as_str().expect("a string label");
            let pad = if h["paddingLeft"] == true { " " } else { "" };
            (
                offset(text, &h["position"]),
                format!("{pad}⟨{}⟩", redact(label)),
            )
        })
        .collect();
    at.sort_by_key(|(offset, _)| std::cmp::Reverse(*offset));
    let mut out = text.to_string();
    for (offset, shown) in at {
        out.insert_str(offset, &shown);
    }
    out
}

/// The labels of a completion answer, one a line.
pub fn show_completion(answer: &Value) -> String {
    let items = match &answer["result"] {
        Value::Array(items) => items.clone(),
        Value::Object(list) => list["items"].as_array().cloned().unwrap_or_default(),
        other => panic!("no completion: {other}"),
    };
    items
        .iter()
        .map(|i| format!("{}\n", i["label"].as_str().unwrap_or_default()))
        .collect()
}

/// A document symbol tree, one symbol a line, children indented.
pub fn show_symbols(symbols: &Value) -> String {
    fn walk(out: &mut String, symbols: &Value, depth: usize) {
        for s in symbols.as_array().into_iter().flatten() {
            let detail = s["detail"]
                .as_str()
                .map(|d| format!(": {d}"))
                .unwrap_or_default();
            let name = s["name"].as_str().unwrap_or_default();
            out.push_str(&format!("{}{name}{detail}\n", "  ".repeat(depth)));
            walk(out, &s["children"], depth + 1);
        }
    }
    let mut out = String::new();
    walk(&mut out, symbols, 0);
    out
}

/// Semantic tokens decoded with the server's legend: `line:column text type [modifiers]`.
pub fn show_semantic_tokens(text: &str, capabilities: &Value, data: &Value) -> String {
    let legend = &capabilities["semanticTokensProvider"]["legend"];
    let names = |key: &str| -> Vec<String> {
        legend[key]
            .as_array()
            .unwrap_or_else(|| panic!("no {key} in the legend: {legend}"))
            .iter()
            .map(|t| t.as_str().unwrap_or_default().to_string())
            .collect()
    };
    let (types, modifiers) = (names("tokenTypes"), names("tokenModifiers"));
    let data: Vec<u64> = data
        .as_array()
        .expect("token data")
        .iter()
        .map(|n| n.as_u64().expect("a number"))
        .collect();
    assert_eq!(data.len() % 5, 0, "five numbers a token");
    let (mut line, mut col) = (0, 0);
    let mut out = String::new();
    for t in data.chunks(5) {
        if t[0] > 0 {
            col = 0;
        }
        line += t[0];
        col += t[1];
        let start = offset(text, &json!({ "line": line, "character": col }));
        let end = offset(text, &json!({ "line": line, "character": col + t[2] }));
        let mods: Vec<&str> = (0..modifiers.len())
            .filter(|i| t[4] & (1 << i) != 0)
            .map(|i| modifiers[i].as_str())
            .collect();
        let mods = if mods.is_empty() {
            String::new()
        } else {
            format!(" [{}]", mods.join(", "))
        };
        out.push_str(&format!(
            "{line}:{col} {:?} {}{mods}\n",
            &text[start..end],
            types[t[3] as usize]
        ));
    }
    out
}

/// `text` with what changes from one run to the next replaced, each only when it has the
/// expected shape: a duration (`12ms`, `1.5s`, `1m02s`) by `[took]`, an age (`5 s ago`,
/// `just now`) by `[age]`, a time (RFC 3339 UTC, `2026-12-01 14:45:31 UTC`, `14:45:31`) by
/// `[time]`, and an idempotency key (64 hex digits in backticks, it hashes the run id) by `[key]`.
pub fn redact(text: &str) -> String {
    text.split('\n')
        .map(redact_line)
        .collect::<Vec<_>>()
        .join("\n")
}

fn redact_line(line: &str) -> String {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let is_duration = |w: &str| {
        w.strip_suffix("ms").is_some_and(digits)
            || w.strip_suffix('s')
                .and_then(|n| n.split_once('.'))
                .is_some_and(|(a, b)| digits(a) && digits(b))
            || w.strip_suffix('s')
                .and_then(|n| n.split_once('m'))
                .is_some_and(|(a, b)| digits(a) && b.len() == 2 && digits(b))
    };
    let is_clock = |w: &str| {
        let parts: Vec<&str> = w.split(':').collect();
        parts.len() == 3 && parts.iter().all(|p| p.len() == 2 && digits(p))
    };
    let is_day = |w: &str| {
        let parts: Vec<&str> = w.split('-').collect();
        parts.len() == 3 && parts[0].len() == 4 && parts.iter().all(|p| digits(p))
    };
    let is_rfc3339 = |w: &str| {
        w.split_once('T')
            .is_some_and(|(day, rest)| is_day(day) && rest.ends_with('Z'))
    };
    let is_key = |w: &str| {
        w.strip_prefix('`')
            .and_then(|w| w.strip_suffix('`'))
            .is_some_and(|k| k.len() == 64 && k.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    let line = line.replace("just now", "[age]");
    let words: Vec<&str> = line.split(' ').collect();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = words[i];
        if is_duration(w) {
            out.push("[took]".into());
        } else if is_rfc3339(w) || is_clock(w) {
            out.push("[time]".into());
        } else if is_day(w)
            && words.get(i + 1).is_some_and(|t| is_clock(t))
            && words.get(i + 2) == Some(&"UTC")
        {
            out.push("[time]".into());
            i += 2;
        } else if is_key(w) {
            out.push("`[key]`".into());
        } else if digits(w) && words.get(i + 2) == Some(&"ago") {
            out.push("[age]".into());
            i += 2;
        } else {
            out.push(w.to_string());
        }
        i += 1;
    }
    out.join(" ")
}
