//! The server never crashes: every request kind at random positions of random and half-typed
//! documents (cuts of the examples), each answered.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::support::{Client, uri};

/// A small deterministic generator, so a failure replays exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn examples() -> Vec<String> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/reference"));
    let mut texts: Vec<String> = std::fs::read_dir(&dir)
        .expect("examples/reference is in the repository")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "reel"))
        .map(|p| std::fs::read_to_string(p).expect("a readable example"))
        .collect();
    assert!(!texts.is_empty(), "examples/reference holds .reel files");
    texts.push(include_str!("../../examples/greet.reel").to_string());
    texts.push(include_str!("../../examples/wait.reel").to_string());
    texts.sort();
    texts
}

/// A document: a cut of an example, a cut with a random slice removed, or random characters.
fn document(rng: &mut Rng, examples: &[String]) -> String {
    let ex = &examples[rng.below(examples.len())];
    let boundary = |s: &str, mut i: usize| {
        i = i.min(s.len());
        while !s.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    match rng.below(3) {
        0 => ex[..boundary(ex, rng.below(ex.len() + 1))].to_string(),
        1 => {
            let a = boundary(ex, rng.below(ex.len() + 1));
            let b = boundary(ex, a + rng.below(40));
            format!("{}{}", &ex[..a], &ex[b..])
        }
        _ => {
            let alphabet: Vec<char> =
                "flow step input env secret { } ( ) [ ] . ?. : = , \" ${ } 1s é😀 \n a b item"
                    .chars()
                    .collect();
            (0..rng.below(200))
                .map(|_| alphabet[rng.below(alphabet.len())])
                .collect()
        }
    }
}

#[test]
fn every_request_at_random_positions_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fuzz.reel");
    let uri = uri(&path);
    let mut client = Client::start(dir.path(), &dir.path().join(".reel"));
    let examples = examples();
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    client.open(&uri, "");
    for version in 2..42 {
        let text = document(&mut rng, &examples);
        client.change(&uri, version, &text);
        let lines = text.lines().count() as u32 + 2;
        for _ in 0..8 {
            // Positions past the ends of lines and of the text are allowed to be asked.
            let position = json!({ "line": rng.below(lines as usize), "character": rng.below(90) });
            let td = json!({ "uri": uri });
            let requests: Vec<(&str, Value)> = vec![
                (
                    "textDocument/hover",
                    json!({ "textDocument": td, "position": position }),
                ),
                (
                    "textDocument/definition",
                    json!({ "textDocument": td, "position": position }),
                ),
                (
                    "textDocument/references",
                    json!({ "textDocument": td, "position": position, "context": { "includeDeclaration": true } }),
                ),
                (
                    "textDocument/rename",
                    json!({ "textDocument": td, "position": position, "newName": "renamed" }),
                ),
                (
                    "textDocument/completion",
                    json!({ "textDocument": td, "position": position }),
                ),
                (
                    "textDocument/signatureHelp",
                    json!({ "textDocument": td, "position": position }),
                ),
                (
                    "textDocument/codeAction",
                    json!({ "textDocument": td, "range": { "start": position, "end": position }, "context": { "diagnostics": [] } }),
                ),
            ];
            for (method, params) in requests {
                let r = client.request(method, params);
                // An error is an answer too, but never an internal one.
                if let Some(e) = r.get("error") {
                    assert_ne!(e["code"], -32603, "{method} on {text:?}: {r}");
                }
            }
        }
        for method in [
            "textDocument/documentSymbol",
            "textDocument/foldingRange",
            "textDocument/formatting",
            "textDocument/inlayHint",
            "textDocument/codeLens",
            "textDocument/semanticTokens/full",
        ] {
            let whole = json!({ "start": { "line": 0, "character": 0 }, "end": { "line": lines, "character": 0 } });
            let r = client.request(method, json!({ "textDocument": { "uri": uri }, "range": whole, "options": { "tabSize": 2, "insertSpaces": true } }));
            assert!(r.get("error").is_none(), "{method} on {text:?}: {r}");
        }
        // The run picker's commands on any document (with or without a store, any flow name).
        for (command, args) in [
            ("reel.server.listRuns", json!([uri, "f"])),
            ("reel.server.showRun", json!([uri, text, null])),
            ("reel.server.showRun", json!([uri])),
        ] {
            let r = client.request(
                "workspace/executeCommand",
                json!({ "command": command, "arguments": args }),
            );
            if let Some(e) = r.get("error") {
                assert_ne!(e["code"], -32603, "{command} on {text:?}: {r}");
            }
        }
    }
    client.shutdown();
}
