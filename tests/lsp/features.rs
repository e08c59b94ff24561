//! The editor features, one request at a time, on a small flow.

use serde_json::{Value, json};

use crate::support::{Client, pos, uri};

const FLOW: &str = r#"/// Says hello.
flow hello {
  /// Who to greet.
  input who: string = "world"

  step greeting = echo {
    value: { line: "Hello, ${input.who}!", size: len(input.who) }
  }

  output greeting.line
}
"#;

fn setup(text: &str) -> (tempfile::TempDir, Client, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hello.reel");
    std::fs::write(&path, text).unwrap();
    let mut client = Client::start(dir.path(), &dir.path().join(".reel"));
    let uri = uri(&path);
    client.open(&uri, text);
    (dir, client, uri)
}

fn labels(completion: &Value) -> Vec<String> {
    completion["result"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|i| i["label"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn diagnostics_are_published_on_open_and_change_like_reel_check() {
    let (_dir, mut client, uri) = setup(FLOW);
    assert_eq!(client.diagnostics(&uri, 1), Vec::<Value>::new());
    let broken = FLOW.replace("output greeting.line", "output greting.line");
    client.change(&uri, 2, &broken);
    let diags = client.diagnostics(&uri, 2);
    assert_eq!(diags.len(), 1, "{diags:?}");
    let d = &diags[0];
    assert_eq!(d["code"], "name.unknown");
    assert_eq!(d["severity"], 1);
    assert_eq!(d["range"]["start"], json!({ "line": 9, "character": 9 }));
    // The quick fix the compiler attached is offered as a code action.
    let actions = client.request(
        "textDocument/codeAction",
        json!({ "textDocument": { "uri": uri }, "range": d["range"], "context": { "diagnostics": [] } }),
    );
    let action = &actions["result"][0];
    let edit = &action["edit"]["changes"][&uri][0];
    assert_eq!(edit["newText"], "greeting", "{actions}");
    client.shutdown();
}

#[test]
fn hover_definition_and_references() {
    let (_dir, mut client, uri) = setup(FLOW);
    let hover = client.at(
        "textDocument/hover",
        &uri,
        pos(FLOW, "greeting.line", 2),
        json!({}),
    );
    let text = hover["result"]["contents"]["value"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        text.contains("step greeting: { line: string, size: int }"),
        "{text}"
    );
    let hover = client.at("textDocument/hover", &uri, pos(FLOW, "who)", 1), json!({}));
    let text = hover["result"]["contents"]["value"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        text.contains("input who: string = \"world\"") && text.contains("Who to greet."),
        "{text}"
    );
    let hover = client.at("textDocument/hover", &uri, pos(FLOW, "len(", 1), json!({}));
    assert!(
        hover["result"]["contents"]["value"]
            .as_str()
            .unwrap()
            .contains("len(value")
    );

    let def = client.at(
        "textDocument/definition",
        &uri,
        pos(FLOW, "greeting.line", 1),
        json!({}),
    );
    assert_eq!(
        def["result"]["range"]["start"],
        json!({ "line": 5, "character": 7 }),
        "{def}"
    );
    let refs = client.at(
        "textDocument/references",
        &uri,
        pos(FLOW, "input who", 7),
        json!({ "context": { "includeDeclaration": true } }),
    );
    assert_eq!(refs["result"].as_array().unwrap().len(), 3, "{refs}");
    client.shutdown();
}

#[test]
fn rename_a_step_and_refuse_a_clash() {
    let (_dir, mut client, uri) = setup(FLOW);
    let r = client.at(
        "textDocument/rename",
        &uri,
        pos(FLOW, "step greeting", 6),
        json!({ "newName": "hi" }),
    );
    let edits = r["result"]["changes"][&uri].as_array().unwrap();
    assert_eq!(edits.len(), 2, "{r}");
    assert!(edits.iter().all(|e| e["newText"] == "hi"));
    let r = client.at(
        "textDocument/rename",
        &uri,
        pos(FLOW, "step greeting", 6),
        json!({ "newName": "input" }),
    );
    assert!(
        r["error"]["message"].as_str().unwrap().contains("keyword"),
        "{r}"
    );
    client.shutdown();
}

#[test]
fn completion_after_input_and_after_a_step() {
    let (_dir, mut client, uri) = setup(FLOW);
    let text = FLOW.replace("output greeting.line", "output greeting.");
    client.change(&uri, 2, &text);
    let c = client.at(
        "textDocument/completion",
        &uri,
        pos(&text, "greeting.\n", 9),
        json!({}),
    );
    assert_eq!(labels(&c), vec!["line", "size"]);
    let text = FLOW.replace("output greeting.line", "output input.");
    client.change(&uri, 3, &text);
    let c = client.at(
        "textDocument/completion",
        &uri,
        pos(&text, "input.\n", 6),
        json!({}),
    );
    assert_eq!(labels(&c), vec!["who"]);
    client.shutdown();
}

#[test]
fn formatting_matches_reel_fmt_and_symbols_list_the_flow() {
    let messy = FLOW.replace("  step greeting", "      step greeting");
    let (_dir, mut client, uri) = setup(&messy);
    let r = client.request(
        "textDocument/formatting",
        json!({ "textDocument": { "uri": uri }, "options": { "tabSize": 2, "insertSpaces": true } }),
    );
    assert_eq!(r["result"][0]["newText"], FLOW, "{r}");
    let r = client.request(
        "textDocument/documentSymbol",
        json!({ "textDocument": { "uri": uri } }),
    );
    let children: Vec<&str> = r["result"][0]["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(children, vec!["who", "greeting", "output"]);
    let r = client.request(
        "textDocument/semanticTokens/full",
        json!({ "textDocument": { "uri": uri } }),
    );
    // Five numbers per token; the first is the doc comment on line 0 (a comment, documentation).
    let data = r["result"]["data"].as_array().unwrap();
    assert!(data.len() > 5 * 10 && data.len() % 5 == 0, "{r}");
    assert_eq!(
        data[..5],
        [json!(0), json!(0), json!(15), json!(5), json!(4)]
    );
    let r = client.at(
        "textDocument/signatureHelp",
        &uri,
        pos(&messy, "len(", 4),
        json!({}),
    );
    assert_eq!(r["result"]["activeParameter"], 0, "{r}");
    client.shutdown();
}

#[test]
fn rapid_edits_are_applied_in_order() {
    let (_dir, mut client, uri) = setup(FLOW);
    // Each edit renames the step; only the last text's name must be known afterwards.
    for version in 2..=40 {
        let text = FLOW.replace("greeting", &format!("g{version}"));
        client.change(&uri, version, &text);
    }
    let last = FLOW.replace("greeting", "g40");
    assert_eq!(client.diagnostics(&uri, 40), Vec::<Value>::new());
    let hover = client.at(
        "textDocument/hover",
        &uri,
        pos(&last, "g40.line", 1),
        json!({}),
    );
    let text = hover["result"]["contents"]["value"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("step g40:"), "{hover}");
    client.shutdown();
}

#[test]
fn incremental_changes_apply_in_order_with_utf16_columns() {
    let text = "flow f {\n  step a = echo {\n    value: \"😀x\"\n  }\n\n  output a\n}\n";
    let (_dir, mut client, uri) = setup(text);
    assert_eq!(client.diagnostics(&uri, 1), Vec::<Value>::new());
    // Two changes in one notification; the second's range is in the text the first left.
    // `x` is at UTF-16 column 14 (the emoji takes two units), and `a` of `output a` at 9; the
    // third change indents that line by four (so formatting has something to do).
    let range = |l: u32, a: u32, b: u32| json!({ "start": { "line": l, "character": a }, "end": { "line": l, "character": b } });
    client.notify(
        "textDocument/didChange",
        json!({ "textDocument": { "uri": uri, "version": 2 }, "contentChanges": [
            { "range": range(2, 14, 15), "text": "yz" },
            { "range": range(5, 9, 10), "text": "b" },
            { "range": range(5, 0, 0), "text": "    " },
        ] }),
    );
    let diags = client.diagnostics(&uri, 2);
    assert_eq!(diags.len(), 1, "{diags:?}");
    assert_eq!(diags[0]["range"], range(5, 13, 14), "{diags:?}");
    let r = client.request(
        "textDocument/formatting",
        json!({ "textDocument": { "uri": uri }, "options": { "tabSize": 2, "insertSpaces": true } }),
    );
    let formatted = r["result"][0]["newText"].as_str().unwrap_or_default();
    assert!(
        formatted.contains("value: \"😀yz\"") && formatted.contains("output b"),
        "{r}"
    );
    // A change without a range replaces the whole text.
    client.change(&uri, 3, text);
    assert_eq!(client.diagnostics(&uri, 3), Vec::<Value>::new());
    client.shutdown();
}
