//! Deeply nested expressions in the editor: `reel lsp` checks on 2 MiB worker stacks, where a
//! sum of about 1,600 terms used to overflow and kill the server. A file past the nesting limit
//! gets one `syntax.too-deep` diagnostic and every request on it is answered; a file at the
//! limit checks clean.

use serde_json::{Value, json};

use crate::support::{Client, uri};

/// `reel_syntax::nesting::MAX_NESTING`.
const MAX: usize = 128;

fn flow(expr: &str) -> String {
    format!("flow deep {{\n  step s = {expr}\n  output s\n}}\n")
}

fn codes(diagnostics: &[Value]) -> Vec<&str> {
    diagnostics
        .iter()
        .filter_map(|d| d["code"].as_str())
        .collect()
}

/// Every request kind at the start, inside and at the end of the deep line, answered.
fn ask_everything(client: &mut Client, uri: &str, text: &str) {
    let line_len = text.lines().nth(1).map_or(0, str::len) as u32;
    for character in [4, 12, line_len / 2, line_len] {
        let at = json!({ "textDocument": { "uri": uri }, "position": { "line": 1, "character": character } });
        for method in [
            "textDocument/hover",
            "textDocument/definition",
            "textDocument/completion",
            "textDocument/signatureHelp",
        ] {
            let r = client.request(method, at.clone());
            assert!(r.get("error").is_none(), "{method}: {r}");
        }
    }
    for method in [
        "textDocument/documentSymbol",
        "textDocument/foldingRange",
        "textDocument/formatting",
        "textDocument/inlayHint",
        "textDocument/semanticTokens/full",
    ] {
        let whole =
            json!({ "start": { "line": 0, "character": 0 }, "end": { "line": 4, "character": 0 } });
        let r = client.request(
            method,
            json!({ "textDocument": { "uri": uri }, "range": whole, "options": { "tabSize": 2, "insertSpaces": true } }),
        );
        assert!(r.get("error").is_none(), "{method}: {r}");
    }
}

#[test]
fn a_file_past_the_limit_is_one_diagnostic_and_the_server_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let uri = uri(&dir.path().join("deep.reel"));
    let mut client = Client::start(dir.path(), &dir.path().join(".reel"));
    let sums = [1_600, 6_400, 50_000];
    for (version, terms) in (1..).zip(sums) {
        let text = flow(&format!("1{}", " + 1".repeat(terms)));
        if version == 1 {
            client.open(&uri, &text);
        } else {
            client.change(&uri, version, &text);
        }
        let diagnostics = client.diagnostics(&uri, version);
        assert_eq!(codes(&diagnostics), ["syntax.too-deep"], "{terms} terms");
        ask_everything(&mut client, &uri, &text);
    }
    let nests = [
        format!("{}1{}", "(".repeat(43_000), ")".repeat(43_000)),
        format!("{}1{}", "{ a: ".repeat(5_000), " }".repeat(5_000)),
    ];
    for (version, expr) in (10..).zip(nests) {
        let text = flow(&expr);
        client.change(&uri, version, &text);
        let diagnostics = client.diagnostics(&uri, version);
        assert_eq!(codes(&diagnostics), ["syntax.too-deep"]);
        ask_everything(&mut client, &uri, &text);
    }
    client.shutdown();
}

#[test]
fn a_file_at_the_limit_checks_clean_and_hovers() {
    let dir = tempfile::tempdir().unwrap();
    let uri = uri(&dir.path().join("deep.reel"));
    let mut client = Client::start(dir.path(), &dir.path().join(".reel"));
    let text = flow(&format!("1{}", " + 1".repeat(MAX - 1)));
    client.open(&uri, &text);
    assert_eq!(client.diagnostics(&uri, 1), Vec::<Value>::new());
    ask_everything(&mut client, &uri, &text);
    let hover = client.request(
        "textDocument/hover",
        json!({ "textDocument": { "uri": uri }, "position": { "line": 1, "character": 8 } }),
    );
    assert!(hover["result"].to_string().contains("int"), "{hover}");
    client.shutdown();
}
