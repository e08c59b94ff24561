//! Editing a flow as an editor does it on a big file: semantic tokens by range and by delta
//! agree with the full list (a delta also from an answer before the server's last), a burst of edits publishes diagnostics in order and ends with the
//! latest version's, and inlay hints asked for a range are the hints of that range.

use std::process::Command;

use serde_json::{Value, json};

use crate::support::{Client, uri};

/// A flow of `n` steps, each reading the one before.
fn long_flow(n: usize) -> String {
    let mut text = String::from(
        "// A long flow.\nflow long {\n  input base: int = 1\n  step s0 = input.base + 1\n",
    );
    for i in 1..n {
        text.push_str(&format!(
            "  /// Step {i}.\n  step s{i} = s{} + len(\"{i}\")\n",
            i - 1
        ));
    }
    text.push_str(&format!("  output s{}\n}}\n", n - 1));
    text
}

fn setup(text: &str, capabilities: Value) -> (tempfile::TempDir, Client, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.reel");
    std::fs::write(&path, text).unwrap();
    let mut client = Client::start_with(dir.path(), &dir.path().join(".reel"), capabilities);
    let uri = uri(&path);
    client.open(&uri, text);
    (dir, client, uri)
}

/// The integers of a semantic tokens answer.
fn ints(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap_or_else(|| panic!("no token data: {v}"))
        .iter()
        .map(|i| i.as_u64().unwrap())
        .collect()
}

/// Encoded tokens as absolute (line, column, length, type, modifiers).
fn absolute(data: &[u64]) -> Vec<[u64; 5]> {
    let (mut line, mut col) = (0, 0);
    data.chunks(5)
        .map(|t| {
            if t[0] > 0 {
                col = 0;
            }
            line += t[0];
            col += t[1];
            [line, col, t[2], t[3], t[4]]
        })
        .collect()
}

/// A 300-step flow opened, and its full semantic tokens: the result id and the list.
fn opened_with_tokens() -> (tempfile::TempDir, Client, String, String, Vec<u64>) {
    let text = long_flow(300);
    let (dir, mut client, uri) = setup(&text, json!({}));
    let full = client.request(
        "textDocument/semanticTokens/full",
        json!({ "textDocument": { "uri": uri } }),
    );
    let id = full["result"]["resultId"]
        .as_str()
        .expect("a result id")
        .to_string();
    let data = ints(&full["result"]["data"]);
    (dir, client, uri, id, data)
}

#[test]
fn semantic_tokens_by_range_and_delta_agree_with_the_full_list() {
    let (_dir, mut client, uri, id, old) = opened_with_tokens();
    let doc = json!({ "uri": uri });

    // The lines an editor shows: the tokens of the full list that start there.
    let range = client.request(
        "textDocument/semanticTokens/range",
        json!({ "textDocument": doc, "range": { "start": { "line": 100, "character": 0 }, "end": { "line": 160, "character": 0 } } }),
    );
    let shown = absolute(&ints(&range["result"]["data"]));
    let want: Vec<_> = absolute(&old)
        .into_iter()
        .filter(|t| (100..160).contains(&t[0]))
        .collect();
    assert!(!want.is_empty());
    assert_eq!(shown, want);

    // A step typed in the middle: the delta applied to the old list is the new full list.
    let at = json!({ "line": 150, "character": 0 });
    client.notify(
        "textDocument/didChange",
        json!({ "textDocument": { "uri": uri, "version": 2 },
                "contentChanges": [{ "range": { "start": at, "end": at }, "text": "  step typed = s10 + 1\n" }] }),
    );
    let delta = client.request(
        "textDocument/semanticTokens/full/delta",
        json!({ "textDocument": doc, "previousResultId": id }),
    );
    let edits = delta["result"]["edits"]
        .as_array()
        .unwrap_or_else(|| panic!("a delta: {delta}"));
    assert_eq!(edits.len(), 1, "{delta}");
    let applied = apply_delta(&old, &delta);
    // Much smaller than the list: the line typed and the one after it.
    assert!(ints(&edits[0]["data"]).len() < 50, "{delta}");
    let now = client.request(
        "textDocument/semanticTokens/full",
        json!({ "textDocument": doc }),
    );
    assert_eq!(applied, ints(&now["result"]["data"]));

    // An unknown previous result: the whole list.
    let unknown = client.request(
        "textDocument/semanticTokens/full/delta",
        json!({ "textDocument": doc, "previousResultId": "nope" }),
    );
    assert_eq!(
        ints(&unknown["result"]["data"]),
        ints(&now["result"]["data"])
    );
    client.shutdown();
}

/// Applies a delta answer's edits to `old`, panicking when the answer is not a delta.
fn apply_delta(old: &[u64], delta: &Value) -> Vec<u64> {
    let edits = delta["result"]["edits"]
        .as_array()
        .unwrap_or_else(|| panic!("a delta, not the whole list: {delta}"));
    let mut applied = old.to_vec();
    for e in edits.iter().rev() {
        let start = e["start"].as_u64().unwrap() as usize;
        let deleted = e["deleteCount"].as_u64().unwrap() as usize;
        applied.splice(start..start + deleted, ints(&e["data"]));
    }
    applied
}

/// Types `key`, the `i`th key of a line typed from column 0 of `line`, as version `i + 2` (the
/// document opened as version 1).
fn type_key(client: &mut Client, uri: &str, line: usize, i: usize, key: char) {
    let at = json!({ "line": line, "character": i });
    client.notify(
        "textDocument/didChange",
        json!({ "textDocument": { "uri": uri, "version": i + 2 },
                "contentChanges": [{ "range": { "start": at, "end": at }, "text": key.to_string() }] }),
    );
}

#[test]
fn a_delta_from_an_answer_before_the_last_is_still_a_delta() {
    // While keys come, the editor cancels answers it never applies and asks for the next delta
    // from the last one it did apply: not the server's newest answer.
    let (_dir, mut client, uri, applied_id, old) = opened_with_tokens();
    let doc = json!({ "uri": uri });
    let typed = "  step typed = s10 + 1\n";
    for (i, key) in typed.chars().enumerate() {
        type_key(&mut client, &uri, 150, i, key);
        // An answer the editor drops (as if cancelled): its id is never used.
        if i % 5 == 0 {
            client.request(
                "textDocument/semanticTokens/full/delta",
                json!({ "textDocument": doc, "previousResultId": applied_id }),
            );
        }
    }
    let delta = client.request(
        "textDocument/semanticTokens/full/delta",
        json!({ "textDocument": doc, "previousResultId": applied_id }),
    );
    let applied = apply_delta(&old, &delta);
    let now = client.request(
        "textDocument/semanticTokens/full",
        json!({ "textDocument": doc }),
    );
    assert_eq!(applied, ints(&now["result"]["data"]));
    client.shutdown();
}

#[test]
fn a_burst_of_edits_publishes_in_order_and_ends_with_the_latest() {
    let text = long_flow(2000);
    let (_dir, mut client, uri) = setup(&text, json!({}));
    client.diagnostics(&uri, 1);
    // A step typed key by key without waiting, the last key making an error.
    let typed = "  step typed = s1 + nosuch";
    for (i, ch) in typed.chars().enumerate() {
        type_key(&mut client, &uri, 500, i, ch);
    }
    let last = typed.chars().count() as i32 + 1;
    let diags = client.diagnostics(&uri, last);
    assert!(
        diags
            .iter()
            .any(|d| d["message"].as_str().unwrap_or("").contains("nosuch")),
        "{diags:?}"
    );
    // The versions published before the latest one came in the order they were typed.
    let mut versions: Vec<i64> = client
        .notifications
        .iter()
        .filter(|n| n["method"] == "textDocument/publishDiagnostics")
        .map(|n| n["params"]["version"].as_i64().unwrap())
        .collect();
    versions.push(last.into());
    assert!(
        versions.windows(2).all(|w| w[0] < w[1]),
        "published out of order: {versions:?}"
    );
    // Nothing older comes after the latest: a request answered now is answered after it.
    client.notifications.clear();
    client.request(
        "textDocument/documentSymbol",
        json!({ "textDocument": { "uri": uri } }),
    );
    assert!(
        !client
            .notifications
            .iter()
            .any(|n| n["method"] == "textDocument/publishDiagnostics"),
        "{:?}",
        client.notifications
    );
    client.shutdown();
}

#[test]
fn hints_asked_for_a_range_are_the_hints_on_its_lines() {
    let text = "flow pipe {\n  step a = echo { value: 1 }\n  step b = a + 1\n  step c = echo { value: b }\n  output c\n}\n";
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("store");
    let path = dir.path().join("pipe.reel");
    std::fs::write(&path, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_reel"))
        .args(["run", "pipe.reel"])
        .current_dir(dir.path())
        .env("REEL_HOME", &home)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut client = Client::start(dir.path(), &home);
    let uri = uri(&path);
    client.open(&uri, text);
    let hints = |client: &mut Client, from: u32, to: u32| -> Vec<Value> {
        let r = client.request(
            "textDocument/inlayHint",
            json!({ "textDocument": { "uri": uri }, "range": { "start": { "line": from, "character": 0 }, "end": { "line": to, "character": 0 } } }),
        );
        r["result"].as_array().cloned().unwrap_or_default()
    };
    let all = hints(&mut client, 0, 100);
    assert_eq!(all.len(), 3, "{all:?}");
    for (from, to) in [(0, 2), (2, 3), (2, 4), (4, 100)] {
        let want: Vec<Value> = all
            .iter()
            .filter(|h| {
                let line = h["position"]["line"].as_u64().unwrap() as u32;
                line >= from && line < to
            })
            .cloned()
            .collect();
        assert_eq!(hints(&mut client, from, to), want, "lines {from}..{to}");
    }
    client.shutdown();
}
