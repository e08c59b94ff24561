//! A small LSP client for the tests: starts `reel lsp`, frames JSON-RPC with `reel_lsp::wire`,
//! matches responses to requests by id and keeps the notifications it receives.

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
}

impl Client {
    /// Starts `reel lsp` in `dir` with `REEL_HOME` set to `home`, and initializes it.
    pub fn start(dir: &Path, home: &Path) -> Client {
        Client::start_with(dir, home, json!({}))
    }

    /// Like [`Client::start`], announcing these client capabilities.
    pub fn start_with(dir: &Path, home: &Path, capabilities: Value) -> Client {
        let mut child = Command::new(env!("CARGO_BIN_EXE_reel"))
            .arg("lsp")
            .current_dir(dir)
            .env("REEL_HOME", home)
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
        };
        let init = client.request(
            "initialize",
            json!({ "processId": null, "rootUri": null, "capabilities": capabilities }),
        );
        assert!(init["result"]["capabilities"].is_object(), "{init}");
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

/// The 0-based line and UTF-16 column of the first `needle` in `text`, plus `shift` characters.
pub fn pos(text: &str, needle: &str, shift: usize) -> (u32, u32) {
    let offset = text
        .find(needle)
        .unwrap_or_else(|| panic!("`{needle}` is in the text"));
    let before = &text[..offset];
    let line = before.matches('\n').count();
    let col: usize = before[before.rfind('\n').map_or(0, |i| i + 1)..]
        .chars()
        .map(char::len_utf16)
        .sum();
    (line as u32, (col + shift) as u32)
}
