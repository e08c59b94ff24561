//! Malformed input on `reel lsp`'s stdin: each malformed message gets the JSON-RPC error the
//! specification gives it, and the server serves the next message. (It used to exit, with
//! status 0 and nothing on stderr, at the first message it could not decode.)

use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Duration;

use reel_lsp::wire::{incoming, write_message};
use serde_json::{Value, json};

/// `reel lsp` driven with raw bytes.
struct Raw {
    child: Child,
    stdin: ChildStdin,
    incoming: Receiver<Value>,
}

impl Raw {
    fn start(dir: &std::path::Path) -> Raw {
        let mut child = Command::new(env!("CARGO_BIN_EXE_reel"))
            .arg("lsp")
            .current_dir(dir)
            .env("REEL_HOME", dir.join(".reel"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("reel lsp starts");
        let stdin = child.stdin.take().unwrap();
        let incoming = incoming(child.stdout.take().unwrap());
        Raw {
            child,
            stdin,
            incoming,
        }
    }

    fn bytes(&mut self, bytes: &str) {
        self.stdin.write_all(bytes.as_bytes()).unwrap();
        self.stdin.flush().unwrap();
    }

    fn send(&mut self, message: Value) {
        write_message(&mut self.stdin, &message).unwrap();
    }

    /// The next response (notifications and server requests are skipped).
    fn response(&mut self, after: &str) -> Value {
        loop {
            let message = self
                .incoming
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|e| panic!("no response after {after}: {e}"));
            if message.get("method").is_none() {
                return message;
            }
        }
    }

    /// Sends `request` with `id` and returns its response.
    fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        let r = self.response(method);
        assert_eq!(r["id"], id, "{r}");
        r
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn framed(body: &str) -> String {
    format!("Content-Length: {}\r\n\r\n{body}", body.len())
}

/// An error response's `(id, code)`.
fn error(r: &Value) -> (Value, i64) {
    (r["id"].clone(), r["error"]["code"].as_i64().unwrap_or(0))
}

#[test]
fn each_malformed_message_is_answered_and_the_next_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let mut lsp = Raw::start(dir.path());
    let init = lsp.request(
        1,
        "initialize",
        json!({ "processId": null, "rootUri": null, "capabilities": {} }),
    );
    assert!(init["result"]["capabilities"].is_object(), "{init}");
    lsp.send(json!({ "jsonrpc": "2.0", "method": "initialized", "params": {} }));
    let symbols = |lsp: &mut Raw, id: i64| {
        let r = lsp.request(
            id,
            "textDocument/documentSymbol",
            json!({ "textDocument": { "uri": "file:///nowhere.reel" } }),
        );
        assert!(r.get("error").is_none(), "{r}");
    };

    // A body that is not JSON: parse error.
    lsp.bytes(&framed(r#"{"jsonrpc": "2.0", "id": 2, "method": "#));
    assert_eq!(error(&lsp.response("bad JSON")), (Value::Null, -32700));
    symbols(&mut lsp, 3);

    // JSON that is not JSON-RPC: invalid request.
    lsp.bytes(&framed(r#"{"hello": "world"}"#));
    assert_eq!(error(&lsp.response("not JSON-RPC")), (Value::Null, -32600));
    lsp.bytes(&framed(r#"[1, 2, 3]"#));
    assert_eq!(error(&lsp.response("a batch")), (Value::Null, -32600));
    lsp.bytes(&framed(r#"{"jsonrpc": "2.0", "id": 4, "method": 42}"#));
    assert_eq!(
        error(&lsp.response("a number as method")),
        (json!(4), -32600)
    );
    symbols(&mut lsp, 5);

    // An unknown method and wrong params: the server's own answers.
    let r = lsp.request(6, "reel/noSuchMethod", json!({}));
    assert_eq!(error(&r), (json!(6), -32601));
    let r = lsp.request(7, "textDocument/hover", json!({ "textDocument": 5 }));
    assert_eq!(error(&r), (json!(7), -32602));
    lsp.send(json!({ "jsonrpc": "2.0", "method": "reel/noSuchNotification", "params": {} }));
    symbols(&mut lsp, 8);

    // A Content-Length too short, then one too long: each costs its own message at most.
    let good = json!({ "jsonrpc": "2.0", "id": 9, "method": "textDocument/documentSymbol", "params": { "textDocument": { "uri": "file:///x.reel" } } }).to_string();
    lsp.bytes(&format!("Content-Length: 12\r\n\r\n{good}"));
    assert_eq!(
        error(&lsp.response("a short length")),
        (Value::Null, -32700)
    );
    symbols(&mut lsp, 10);
    // Too long: the body ends where the next message's header begins, and both are served.
    lsp.bytes(&format!("Content-Length: 9999\r\n\r\n{good}"));
    lsp.send(json!({ "jsonrpc": "2.0", "id": 11, "method": "textDocument/foldingRange", "params": { "textDocument": { "uri": "file:///x.reel" } } }));
    let mut ids = [
        lsp.response("a long length")["id"].clone(),
        lsp.response("a long length")["id"].clone(),
    ];
    ids.sort_by_key(|id| id.as_i64());
    assert_eq!(ids, [json!(9), json!(11)]);

    // A header without a usable length: parse error, then on. Bytes outside any message are
    // skipped.
    lsp.bytes("Content-Length: lots\r\n\r\n{}");
    assert_eq!(error(&lsp.response("a bad length")), (Value::Null, -32700));
    lsp.bytes("garbage\r\n\r\n");
    symbols(&mut lsp, 12);

    // And the session still ends as it should.
    let r = lsp.request(13, "shutdown", Value::Null);
    assert!(r.get("error").is_none(), "{r}");
    lsp.send(json!({ "jsonrpc": "2.0", "method": "exit" }));
    let status = lsp.child.wait().unwrap();
    assert!(status.success(), "{status}");
}
