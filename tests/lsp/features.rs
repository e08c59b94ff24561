//! The editor features, one request at a time, on a small flow. Each request is made at the `$0`
//! of a fixture and its answer is shown as text in an inline snapshot (see `support`).

use serde_json::{Value, json};

use crate::support::{
    Client, Fixture, annotate, apply_edits, show_completion, show_diagnostics, show_locations,
    show_semantic_tokens, show_symbols, uri,
};

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

/// `FLOW` with `$0` put in before the first `needle` (and after it with `after`).
fn marked(needle: &str, cursor: usize) -> Fixture {
    let at = FLOW.find(needle).expect("the needle is in FLOW") + cursor;
    Fixture::new(&format!("{}$0{}", &FLOW[..at], &FLOW[at..]))
}

fn setup(text: &str) -> (tempfile::TempDir, Client, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hello.reel");
    std::fs::write(&path, text).unwrap();
    let mut client = Client::start(dir.path(), &dir.path().join(".reel"));
    let uri = uri(&path);
    client.open(&uri, text);
    (dir, client, uri)
}

/// The Markdown of a hover answer.
fn hover_text(hover: &Value) -> String {
    hover["result"]["contents"]["value"]
        .as_str()
        .unwrap_or_else(|| panic!("no hover: {hover}"))
        .to_string()
}

#[test]
fn diagnostics_are_published_on_open_and_change_like_reel_check() {
    let (_dir, mut client, uri) = setup(FLOW);
    assert_eq!(client.diagnostics(&uri, 1), Vec::<Value>::new());
    let broken = FLOW.replace("output greeting.line", "output greting.line");
    client.change(&uri, 2, &broken);
    let diags = client.diagnostics(&uri, 2);
    let shown = show_diagnostics(&broken, &diags);
    insta::assert_snapshot!(shown, @r#"
        /// Says hello.
        flow hello {
          /// Who to greet.
          input who: string = "world"

          step greeting = echo {
            value: { line: "Hello, ${input.who}!", size: len(input.who) }
          }

          output greting.line
                 ^^^^^^^ name.unknown error: nothing called `greting` is in scope
                         unknown name
                         help: did you mean `greeting`?
        }
        "#);
    // The quick fix the compiler attached is offered as a code action.
    let actions = client.request(
        "textDocument/codeAction",
        json!({ "textDocument": { "uri": uri }, "range": diags[0]["range"], "context": { "diagnostics": [] } }),
    );
    let action = &actions["result"][0];
    let fixed = apply_edits(&broken, &action["edit"]["changes"][&uri]);
    assert_eq!(fixed, FLOW, "{actions}");
    insta::assert_snapshot!(action["title"].as_str().unwrap_or_default(), @"replace with `greeting`");
    client.shutdown();
}

#[test]
fn hover_definition_and_references() {
    let (_dir, mut client, uri) = setup(FLOW);
    let at = marked("greeting.line", 2);
    let hover = client.at("textDocument/hover", &uri, at.cursor(), json!({}));
    insta::assert_snapshot!(hover_text(&hover), @r#"
        ```reel
        step greeting: { line: string, size: int }
        ```

        ```reel
        echo (effect) { value: json } -> the type of `value`
        ```

        Records a value as an effect and returns it unchanged.
        "#);
    let at = marked("who)", 1);
    let hover = client.at("textDocument/hover", &uri, at.cursor(), json!({}));
    insta::assert_snapshot!(hover_text(&hover), @r#"
        ```reel
        input who: string = "world"
        ```

        Who to greet.
        "#);
    let at = marked("len(", 1);
    let hover = client.at("textDocument/hover", &uri, at.cursor(), json!({}));
    insta::assert_snapshot!(hover_text(&hover), @r#"
        ```reel
        len(value: list<T> | string | json) -> int
        ```

        The number of elements of a list, characters of a string, or keys of an object.
        "#);

    let at = marked("greeting.line", 1);
    let def = client.at("textDocument/definition", &uri, at.cursor(), json!({}));
    insta::assert_snapshot!(show_locations(FLOW, &uri, &def["result"]), @r#"
        /// Says hello.
        flow hello {
          /// Who to greet.
          input who: string = "world"

          step greeting = echo {
               ^^^^^^^^
            value: { line: "Hello, ${input.who}!", size: len(input.who) }
          }

          output greeting.line
        }
        "#);
    let at = marked("input who", 7);
    let refs = client.at(
        "textDocument/references",
        &uri,
        at.cursor(),
        json!({ "context": { "includeDeclaration": true } }),
    );
    insta::assert_snapshot!(show_locations(FLOW, &uri, &refs["result"]), @r#"
        /// Says hello.
        flow hello {
          /// Who to greet.
          input who: string = "world"
                ^^^

          step greeting = echo {
            value: { line: "Hello, ${input.who}!", size: len(input.who) }
                                           ^^^
                                                                   ^^^
          }

          output greeting.line
        }
        "#);
    client.shutdown();
}

#[test]
fn rename_a_step_and_refuse_a_clash() {
    let (_dir, mut client, uri) = setup(FLOW);
    let at = marked("step greeting", 6);
    let r = client.at(
        "textDocument/rename",
        &uri,
        at.cursor(),
        json!({ "newName": "hi" }),
    );
    insta::assert_snapshot!(apply_edits(FLOW, &r["result"]["changes"][&uri]), @r#"
        /// Says hello.
        flow hello {
          /// Who to greet.
          input who: string = "world"

          step hi = echo {
            value: { line: "Hello, ${input.who}!", size: len(input.who) }
          }

          output hi.line
        }
        "#);
    let r = client.at(
        "textDocument/rename",
        &uri,
        at.cursor(),
        json!({ "newName": "input" }),
    );
    insta::assert_snapshot!(r["error"]["message"].as_str().unwrap_or_default(), @"`input` is a keyword");
    client.shutdown();
}

#[test]
fn completion_after_input_and_after_a_step() {
    let (_dir, mut client, uri) = setup(FLOW);
    let at = Fixture::new(&FLOW.replace("output greeting.line", "output greeting.$0"));
    client.change(&uri, 2, &at.text);
    let c = client.at("textDocument/completion", &uri, at.cursor(), json!({}));
    insta::assert_snapshot!(show_completion(&c), @r#"
        line
        size
        "#);
    let at = Fixture::new(&FLOW.replace("output greeting.line", "output input.$0"));
    client.change(&uri, 3, &at.text);
    let c = client.at("textDocument/completion", &uri, at.cursor(), json!({}));
    insta::assert_snapshot!(show_completion(&c), @"who");
    client.shutdown();
}

#[test]
fn completion_after_equals_offers_the_flows_names_and_an_empty_line_the_members() {
    let (_dir, mut client, uri) = setup(FLOW);
    let at = Fixture::new(&FLOW.replace(
        "\n  output greeting.line",
        "\n  step probe = gre$0\n  output greeting.line",
    ));
    client.change(&uri, 2, &at.text);
    let c = client.at("textDocument/completion", &uri, at.cursor(), json!({}));
    let shown = show_completion(&c);
    let labels: Vec<&str> = shown.lines().collect();
    for expected in ["greeting", "input.who", "upper", "http.get"] {
        assert!(labels.contains(&expected), "{expected} missing:\n{shown}");
    }
    for unexpected in ["probe", "item", "index", "step"] {
        assert!(
            !labels.contains(&unexpected),
            "{unexpected} offered:\n{shown}"
        );
    }
    let at =
        Fixture::new(&FLOW.replace("\n  output greeting.line", "\n  $0\n  output greeting.line"));
    client.change(&uri, 3, &at.text);
    let c = client.at("textDocument/completion", &uri, at.cursor(), json!({}));
    assert_eq!(show_completion(&c), "input\nsecret\nenv\nstep\noutput\n");
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
    assert_eq!(apply_edits(&messy, &r["result"]), FLOW, "{r}");
    let r = client.request(
        "textDocument/documentSymbol",
        json!({ "textDocument": { "uri": uri } }),
    );
    insta::assert_snapshot!(show_symbols(&r["result"]), @r#"
        hello: flow
          who: input: string
          greeting: echo
          output
        "#);
    // Written as JSON by the server and put in place by the relay (`prepared.rs`).
    let r = client.request(
        "textDocument/foldingRange",
        json!({ "textDocument": { "uri": uri } }),
    );
    assert_eq!(
        r["result"],
        json!([
            { "startLine": 1, "endLine": 10 },
            { "startLine": 5, "endLine": 7 }
        ]),
        "{r}"
    );
    let r = client.request(
        "textDocument/semanticTokens/full",
        json!({ "textDocument": { "uri": uri } }),
    );
    let tokens = show_semantic_tokens(&messy, &client.capabilities, &r["result"]["data"]);
    insta::assert_snapshot!(tokens, @r#"
        0:0 "/// Says hello." comment [documentation]
        1:0 "flow" keyword
        2:2 "/// Who to greet." comment [documentation]
        3:2 "input" keyword
        3:8 "who" parameter [declaration]
        3:22 "\"" string
        3:23 "world" string
        3:28 "\"" string
        5:6 "step" keyword
        5:11 "greeting" variable [declaration]
        5:22 "echo" namespace
        6:19 "\"" string
        6:20 "Hello, " string
        6:29 "input" keyword
        6:35 "who" parameter
        6:39 "!" string
        6:40 "\"" string
        6:49 "len" function
        6:53 "input" keyword
        6:59 "who" parameter
        9:2 "output" keyword
        9:9 "greeting" variable
        "#);
    let at = Fixture::new(&messy.replace("len(", "len($0"));
    let r = client.at("textDocument/signatureHelp", &uri, at.cursor(), json!({}));
    let help = &r["result"];
    let active = &help["signatures"][help["activeSignature"].as_u64().unwrap_or(0) as usize];
    insta::assert_snapshot!(
        format!("{}\nactive parameter: {}", active["label"].as_str().unwrap_or_default(), help["activeParameter"]),
        @r#"
        len(value: list<T> | string | json) -> int
        active parameter: 0
        "#
    );
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
    let at = Fixture::new(
        &FLOW
            .replace("greeting", "g40")
            .replace("g40.line", "g$040.line"),
    );
    assert_eq!(client.diagnostics(&uri, 40), Vec::<Value>::new());
    let hover = client.at("textDocument/hover", &uri, at.cursor(), json!({}));
    insta::assert_snapshot!(hover_text(&hover), @r#"
        ```reel
        step g40: { line: string, size: int }
        ```

        ```reel
        echo (effect) { value: json } -> the type of `value`
        ```

        Records a value as an effect and returns it unchanged.
        "#);
    client.shutdown();
}

#[test]
fn incremental_changes_apply_in_order_with_utf16_columns() {
    let text = "flow f {\n  step a = echo {\n    value: \"😀x\"\n  }\n\n  output a\n}\n";
    let (_dir, mut client, uri) = setup(text);
    assert_eq!(client.diagnostics(&uri, 1), Vec::<Value>::new());
    // Two changes in one notification; the second's range is in the text the first left. The
    // ranges are marked in the text each change applies to: `x` (after an emoji of two UTF-16
    // units) and the `a` of `output a`; the third change indents that line by four (so
    // formatting has something to do).
    let first =
        Fixture::new("flow f {\n  step a = echo {\n    value: \"😀$0x$0\"\n  }\n\n  output a\n}\n");
    let second = Fixture::new(
        "flow f {\n  step a = echo {\n    value: \"😀yz\"\n  }\n\n  output $0a$0\n}\n",
    );
    let third = Fixture::new(
        "flow f {\n  step a = echo {\n    value: \"😀yz\"\n  }\n\n$0$0  output b\n}\n",
    );
    client.notify(
        "textDocument/didChange",
        json!({ "textDocument": { "uri": uri, "version": 2 }, "contentChanges": [
            { "range": first.range(), "text": "yz" },
            { "range": second.range(), "text": "b" },
            { "range": third.range(), "text": "    " },
        ] }),
    );
    let now = "flow f {\n  step a = echo {\n    value: \"😀yz\"\n  }\n\n      output b\n}\n";
    let diags = client.diagnostics(&uri, 2);
    insta::assert_snapshot!(show_diagnostics(now, &diags), @r#"
        flow f {
          step a = echo {
            value: "😀yz"
          }

              output b
                     ^ name.unknown error: nothing called `b` is in scope
                       unknown name
                       help: did you mean `a`?
        }
        "#);
    let r = client.request(
        "textDocument/formatting",
        json!({ "textDocument": { "uri": uri }, "options": { "tabSize": 2, "insertSpaces": true } }),
    );
    insta::assert_snapshot!(apply_edits(now, &r["result"]), @r#"
        flow f {
          step a = echo {
            value: "😀yz"
          }

          output b
        }
        "#);
    // A change without a range replaces the whole text.
    client.change(&uri, 3, text);
    assert_eq!(client.diagnostics(&uri, 3), Vec::<Value>::new());
    client.shutdown();
}

#[test]
fn the_conventions_render_what_they_should() {
    let f = Fixture::new("flow f {\n  step $0a = 😀$0 + 1\n}\n");
    assert_eq!(f.text, "flow f {\n  step a = 😀 + 1\n}\n");
    assert_eq!(f.marks, vec![(1, 7), (1, 13)]);
    insta::assert_snapshot!(annotate(&f.text, &[(f.range(), "here".to_string())]), @r#"
        flow f {
          step a = 😀 + 1
               ^^^^^ here
        }
        "#);
}
