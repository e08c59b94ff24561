//! Past runs inline: run a flow with the `reel` binary, then see each step's recorded result as an
//! inlay hint on its line, marked stale after an edit, and refreshed live while a run waits.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::support::{Client, uri};

/// Runs `reel` in `dir` with the store in `home`; returns stdout, asserting success.
fn reel(dir: &Path, home: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_reel"))
        .args(args)
        .current_dir(dir)
        .env("REEL_HOME", home)
        .output()
        .expect("reel runs");
    assert!(
        out.status.success(),
        "reel {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The hints of `uri`, as (line, label).
fn hints(client: &mut Client, uri: &str) -> Vec<(u64, String)> {
    let r = client.request(
        "textDocument/inlayHint",
        json!({ "textDocument": { "uri": uri }, "range": { "start": { "line": 0, "character": 0 }, "end": { "line": 100, "character": 0 } } }),
    );
    r["result"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .iter()
        .map(|h| {
            (
                h["position"]["line"].as_u64().unwrap(),
                h["label"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

const PIPELINE: &str = r#"flow pipeline {
  input n: int = 2

  step a = echo {
    value: { x: input.n }
  }

  step b = a.x + 1

  output b
}
"#;

#[test]
fn recorded_results_show_on_their_lines_and_go_stale_on_edit() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("store");
    let path = dir.path().join("pipe.reel");
    std::fs::write(&path, PIPELINE).unwrap();
    let mut client = Client::start(dir.path(), &home);
    let uri = uri(&path);
    client.open(&uri, PIPELINE);
    // No store yet: no hints, and no error.
    assert_eq!(hints(&mut client, &uri), Vec::new());

    reel(dir.path(), &home, &["run", "pipe.reel"]);
    let h = hints(&mut client, &uri);
    assert_eq!(h.len(), 2, "{h:?}");
    assert_eq!(h[0].0, 3);
    assert!(
        h[0].1.starts_with("✓ ") && h[0].1.ends_with(r#"{"x":2}"#),
        "{h:?}"
    );
    assert_eq!(h[1].0, 7);
    assert!(h[1].1.starts_with("✓ ") && h[1].1.ends_with(" 3"), "{h:?}");

    // Hover on the step adds the recorded output.
    let hover = client.at("textDocument/hover", &uri, (3, 7), json!({}));
    let text = hover["result"]["contents"]["value"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.contains("Output:") && text.contains("\"x\": 2"),
        "{hover}"
    );

    let edited = PIPELINE.replace("a.x + 1", "a.x + 2");
    client.change(&uri, 2, &edited);
    let h = hints(&mut client, &uri);
    assert!(!h[0].1.starts_with("(stale)"), "{h:?}");
    assert!(h[1].1.starts_with("(stale) ✓"), "{h:?}");
    // While the text has errors, nothing can be verified.
    let broken = PIPELINE.replace("a.x + 1", "a.y + 1");
    client.change(&uri, 3, &broken);
    let h = hints(&mut client, &uri);
    assert!(
        h.iter().all(|(_, l)| l.starts_with("(unverified)")),
        "{h:?}"
    );
    client.shutdown();
}

const WAITER: &str = r#"flow waiter {
  step go = signal {
    name: "go"
  }

  output go
}
"#;

#[test]
fn a_waiting_run_refreshes_the_hints_when_its_signal_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("store");
    let path = dir.path().join("wait.reel");
    std::fs::write(&path, WAITER).unwrap();
    let capabilities = json!({ "workspace": { "inlayHint": { "refreshSupport": true } } });
    let mut client = Client::start_with(dir.path(), &home, capabilities);
    let uri = uri(&path);
    client.open(&uri, WAITER);
    assert_eq!(hints(&mut client, &uri), Vec::new());

    let out = reel(dir.path(), &home, &["run", "wait.reel", "--json"]);
    let run: Value = serde_json::from_str(&out).unwrap();
    let id = run["run"].as_str().unwrap().to_string();
    let h = refreshed_until(&mut client, &uri, |h| !h.is_empty());
    assert_eq!(h, vec![(1, "⏸ waiting for signal `go`".to_string())]);

    reel(dir.path(), &home, &["signal", &id, "go", r#""hi""#]);
    reel(dir.path(), &home, &["worker", "--until-idle"]);
    let h = refreshed_until(&mut client, &uri, |h| {
        h.iter().any(|(_, l)| l.starts_with('✓'))
    });
    assert_eq!(h.len(), 1, "{h:?}");
    assert!(
        h[0].1.starts_with("✓ ") && h[0].1.ends_with(r#""hi""#),
        "{h:?}"
    );
    client.shutdown();
}

/// Waits for inlay hint refreshes until the hints satisfy `done` (a refresh may come while a
/// process is still writing, and then another follows).
fn refreshed_until(
    client: &mut Client,
    uri: &str,
    done: impl Fn(&[(u64, String)]) -> bool,
) -> Vec<(u64, String)> {
    for _ in 0..20 {
        client.wait_for("workspace/inlayHint/refresh", |_| true);
        let h = hints(client, uri);
        if done(&h) {
            return h;
        }
    }
    panic!("the hints never got there");
}

/// The code lenses of `uri`, as (line, title, command).
fn lenses(client: &mut Client, uri: &str) -> Vec<(u64, String, String)> {
    let r = client.request(
        "textDocument/codeLens",
        json!({ "textDocument": { "uri": uri } }),
    );
    r["result"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .iter()
        .map(|l| {
            (
                l["range"]["start"]["line"].as_u64().unwrap(),
                l["command"]["title"].as_str().unwrap().to_string(),
                l["command"]["command"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn execute(client: &mut Client, command: &str, arguments: Value) -> Value {
    client.request(
        "workspace/executeCommand",
        json!({ "command": command, "arguments": arguments }),
    )
}

#[test]
fn lenses_name_the_shown_run_and_the_picker_pins_another() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("store");
    let path = dir.path().join("pipe.reel");
    let text = format!("// two runs\n{PIPELINE}");
    std::fs::write(&path, &text).unwrap();
    let capabilities = json!({ "workspace": {
        "inlayHint": { "refreshSupport": true },
        "codeLens": { "refreshSupport": true },
    } });
    let mut client = Client::start_with(dir.path(), &home, capabilities);
    let uri = uri(&path);
    client.open(&uri, &text);
    let before = lenses(&mut client, &uri);
    let titles: Vec<&str> = before.iter().map(|l| l.1.as_str()).collect();
    assert_eq!(titles, ["▶ Run pipeline", "No runs yet", "Pick run…"]);
    assert!(before.iter().all(|l| l.0 == 1), "{before:?}");
    assert_eq!(before[0].2, "reel.runFlow");
    assert_eq!(before[2].2, "reel.pickRun");
    assert!(
        execute(
            &mut client,
            "reel.server.listRuns",
            json!([uri, "pipeline"])
        )["result"]
            .as_array()
            .is_some_and(|a| a.is_empty())
    );

    let first: Value =
        serde_json::from_str(&reel(dir.path(), &home, &["run", "pipe.reel", "--json"])).unwrap();
    let second: Value = serde_json::from_str(&reel(
        dir.path(),
        &home,
        &["run", "pipe.reel", "--input", "n=5", "--json"],
    ))
    .unwrap();
    let (first, second) = (
        first["run"].as_str().unwrap(),
        second["run"].as_str().unwrap(),
    );

    let shown = lenses(&mut client, &uri);
    assert!(
        shown[1]
            .1
            .starts_with(&format!("Showing run {second} · succeeded · ")),
        "{shown:?}"
    );
    assert!(!shown[1].1.ends_with("pinned"), "{shown:?}");
    assert!(hints(&mut client, &uri)[0].1.ends_with(r#"{"x":5}"#));

    let listed = execute(
        &mut client,
        "reel.server.listRuns",
        json!([uri, "pipeline"]),
    );
    let listed = listed["result"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"));
    let ids: Vec<&str> = listed.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [second, first], "newest first");
    assert_eq!(listed[0]["status"], "succeeded");
    // What tells the runs apart: their inputs, in the detail line too.
    assert_eq!(listed[0]["inputs"], json!({ "n": 5 }));
    assert_eq!(listed[1]["inputs"], json!({ "n": 2 }));
    assert!(
        listed[0]["detail"].as_str().unwrap().ends_with(" · n: 5"),
        "{listed:?}"
    );
    assert!(listed[0]["started_at"].as_str().unwrap().ends_with('Z'));
    assert!(listed[0]["ended_at"].is_string());
    assert!(
        listed[0]["age"]
            .as_str()
            .is_some_and(|a| a.ends_with("ago") || a == "just now"),
        "{listed:?}"
    );

    // Pinning the first run: the hints and the lens show it, and the editor is told to refresh.
    let r = execute(
        &mut client,
        "reel.server.showRun",
        json!([uri, "pipeline", first]),
    );
    assert!(r.get("error").is_none(), "{r}");
    client.wait_for("workspace/inlayHint/refresh", |_| true);
    client.wait_for("workspace/codeLens/refresh", |_| true);
    assert!(hints(&mut client, &uri)[0].1.ends_with(r#"{"x":2}"#));
    let pinned = lenses(&mut client, &uri);
    assert!(
        pinned[1].1.starts_with(&format!("Showing run {first} · "))
            && pinned[1].1.ends_with(" · pinned"),
        "{pinned:?}"
    );
    let hover = client.at("textDocument/hover", &uri, (4, 7), json!({}));
    assert!(
        hover["result"]["contents"]["value"]
            .as_str()
            .is_some_and(|t| t.contains(first)),
        "{hover}"
    );

    // Following the latest again.
    execute(
        &mut client,
        "reel.server.showRun",
        json!([uri, "pipeline", null]),
    );
    assert!(hints(&mut client, &uri)[0].1.ends_with(r#"{"x":5}"#));

    // Bad arguments get an error that says what the command takes.
    let bad = execute(&mut client, "reel.server.listRuns", json!([]));
    assert!(
        bad["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("URI and a flow name")),
        "{bad}"
    );
    let unknown = execute(&mut client, "reel.server.nope", json!([uri, "pipeline"]));
    assert!(
        unknown["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("unknown command"))
    );
    client.shutdown();
}
