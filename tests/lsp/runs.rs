//! Past runs inline: run a flow with the `reel` binary, then see each step's recorded result as an
//! inlay hint on its line, marked stale after an edit, and refreshed live while a run waits.
//! Hints are shown written into the source where they land, lenses as `line: title [command]`
//! (see `support`).

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::support::{Client, Fixture, redact, show_hints, uri};

/// Runs `reel` in `dir` with the store in `home`; returns stdout, asserting success.
pub fn reel(dir: &Path, home: &Path, args: &[&str]) -> String {
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

/// The hints of `uri`, whose text is `text`, written into it.
pub fn hints(client: &mut Client, uri: &str, text: &str) -> String {
    let r = client.request(
        "textDocument/inlayHint",
        json!({ "textDocument": { "uri": uri }, "range": { "start": { "line": 0, "character": 0 }, "end": { "line": 100, "character": 0 } } }),
    );
    show_hints(text, &r["result"])
}

/// An effect and a pure step reading it: the flow most of these tests run.
pub const PIPELINE: &str = r#"flow pipeline {
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
    assert_eq!(hints(&mut client, &uri, PIPELINE), PIPELINE);

    let run: Value =
        serde_json::from_str(&reel(dir.path(), &home, &["run", "pipe.reel", "--json"])).unwrap();
    let run = [(run["run"].as_str().unwrap(), "[run]")];
    insta::assert_snapshot!(hints(&mut client, &uri, PIPELINE), @r#"
        flow pipeline {
          input n: int = 2

          step a = echo { ⟨✓ {"x":2}⟩
            value: { x: input.n }
          }

          step b = a.x + 1 ⟨✓ 3⟩

          output b
        }
        "#);

    // Hover on the step adds the recorded output.
    let at = Fixture::new(&PIPELINE.replace("step a =", "step $0a ="));
    let hover = client.at("textDocument/hover", &uri, at.cursor(), json!({}));
    let text = hover["result"]["contents"]["value"]
        .as_str()
        .unwrap_or_default();
    insta::assert_snapshot!(name_runs(&redact(text), &run), @r#"
        ```reel
        step a: { x: int }
        ```

        ```reel
        echo (effect) { value: json } -> the type of `value`
        ```

        Records a value as an effect and returns it unchanged.

        ---

        **Run `[run]`** (succeeded)

        Output:
        ```json
        {
          "x": 2
        }
        ```

        Took [took]

        Attempts:
        - attempt 1 at [time]

        Idempotency key: `[key]`

        Effects recorded: 1
        "#);

    let edited = PIPELINE.replace("a.x + 1", "a.x + 2");
    client.change(&uri, 2, &edited);
    insta::assert_snapshot!(hints(&mut client, &uri, &edited), @r#"
        flow pipeline {
          input n: int = 2

          step a = echo { ⟨✓ {"x":2}⟩
            value: { x: input.n }
          }

          step b = a.x + 2 ⟨(stale) ✓ 3⟩

          output b
        }
        "#);
    // While a step has an error, its result cannot be compared with the run; the others still
    // are.
    let broken = PIPELINE.replace("a.x + 1", "a.y + 1");
    client.change(&uri, 3, &broken);
    insta::assert_snapshot!(hints(&mut client, &uri, &broken), @r#"
        flow pipeline {
          input n: int = 2

          step a = echo { ⟨✓ {"x":2}⟩
            value: { x: input.n }
          }

          step b = a.y + 1 ⟨(?) ✓ 3⟩

          output b
        }
        "#);
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
    assert_eq!(hints(&mut client, &uri, WAITER), WAITER);

    let out = reel(dir.path(), &home, &["run", "wait.reel", "--json"]);
    let run: Value = serde_json::from_str(&out).unwrap();
    let id = run["run"].as_str().unwrap().to_string();
    let h = refreshed_until(&mut client, &uri, |h| h != WAITER);
    insta::assert_snapshot!(h, @r#"
        flow waiter {
          step go = signal { ⟨⏸ waiting for signal `go`⟩
            name: "go"
          }

          output go
        }
        "#);

    reel(dir.path(), &home, &["signal", &id, "go", r#""hi""#]);
    reel(dir.path(), &home, &["worker", "--until-idle"]);
    // How long the wait took depends on how fast the test sends the signal.
    let h = refreshed_until(&mut client, &uri, |h| h.contains("⟨✓")).replace(" · [took]", "");
    insta::assert_snapshot!(h, @r#"
        flow waiter {
          step go = signal { ⟨✓ "hi"⟩
            name: "go"
          }

          output go
        }
        "#);
    client.shutdown();
}

/// Waits for inlay hint refreshes until the hints of `WAITER` satisfy `done` (a refresh may come
/// while a process is still writing, and then another follows).
fn refreshed_until(client: &mut Client, uri: &str, done: impl Fn(&str) -> bool) -> String {
    for _ in 0..20 {
        client.wait_for("workspace/inlayHint/refresh", |_| true);
        let h = hints(client, uri, WAITER);
        if done(&h) {
            return h;
        }
    }
    panic!("the hints never got there");
}

/// The code lenses of `uri`, one a line: `line: title [command]`, redacted, the runs' ids named.
pub fn lenses(client: &mut Client, uri: &str, runs: &[(&str, &str)]) -> String {
    let r = client.request(
        "textDocument/codeLens",
        json!({ "textDocument": { "uri": uri } }),
    );
    let shown: String = r["result"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .iter()
        .map(|l| {
            format!(
                "{}: {} [{}]\n",
                l["range"]["start"]["line"],
                redact(l["command"]["title"].as_str().unwrap_or_default()),
                l["command"]["command"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    name_runs(&shown, runs)
}

/// `text` with each run id replaced by its name in the test.
pub fn name_runs(text: &str, runs: &[(&str, &str)]) -> String {
    runs.iter()
        .fold(text.to_string(), |text, (id, name)| text.replace(id, name))
}

/// The runs `reel.server.listRuns` gives, one a line, redacted, the runs' ids named.
fn listed(client: &mut Client, uri: &str, runs: &[(&str, &str)]) -> String {
    let listed = execute(client, "reel.server.listRuns", json!([uri, "pipeline"]));
    let shown: String = listed["result"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .map(|r| {
            format!(
                "{} {} inputs {} · started {} · ended {} · {} · detail: {}\n",
                r["id"].as_str().unwrap_or_default(),
                r["status"].as_str().unwrap_or_default(),
                r["inputs"],
                redact(r["started_at"].as_str().unwrap_or("-")),
                redact(r["ended_at"].as_str().unwrap_or("-")),
                redact(r["age"].as_str().unwrap_or("-")),
                redact(r["detail"].as_str().unwrap_or("-")),
            )
        })
        .collect();
    name_runs(&shown, runs)
}

pub fn execute(client: &mut Client, command: &str, arguments: Value) -> Value {
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
    insta::assert_snapshot!(lenses(&mut client, &uri, &[]), @r#"
        1: ▶ Run pipeline [reel.server.run]
        1: No runs yet [reel.server.pickRun]
        1: Pick run… [reel.server.pickRun]
        "#);
    assert_eq!(listed(&mut client, &uri, &[]), "");

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
    let runs = [(first, "[first]"), (second, "[second]")];

    insta::assert_snapshot!(lenses(&mut client, &uri, &runs), @r#"
        1: ▶ Run pipeline [reel.server.run]
        1: Showing run [second] · succeeded · [age] [reel.server.pickRun]
        1: Pick run… [reel.server.pickRun]
        "#);
    insta::assert_snapshot!(hints(&mut client, &uri, &text), @r#"
        // two runs
        flow pipeline {
          input n: int = 2

          step a = echo { ⟨✓ {"x":5}⟩
            value: { x: input.n }
          }

          step b = a.x + 1 ⟨✓ 6⟩

          output b
        }
        "#);
    // Newest first; what tells the runs apart is their inputs, in the detail line too.
    insta::assert_snapshot!(listed(&mut client, &uri, &runs), @r#"
        [second] succeeded inputs {"n":5} · started [time] · ended [time] · [age] · detail: started [time] · took [took] · n: 5
        [first] succeeded inputs {"n":2} · started [time] · ended [time] · [age] · detail: started [time] · took [took] · n: 2
        "#);

    // Pinning the first run: the hints and the lens show it, and the editor is told to refresh.
    let r = execute(
        &mut client,
        "reel.server.showRun",
        json!([uri, "pipeline", first]),
    );
    assert!(r.get("error").is_none(), "{r}");
    client.wait_for("workspace/inlayHint/refresh", |_| true);
    client.wait_for("workspace/codeLens/refresh", |_| true);
    insta::assert_snapshot!(hints(&mut client, &uri, &text), @r#"
        // two runs
        flow pipeline {
          input n: int = 2

          step a = echo { ⟨✓ {"x":2}⟩
            value: { x: input.n }
          }

          step b = a.x + 1 ⟨✓ 3⟩

          output b
        }
        "#);
    insta::assert_snapshot!(lenses(&mut client, &uri, &runs), @r#"
        1: ▶ Run pipeline [reel.server.run]
        1: Showing run [first] · succeeded · [age] · pinned [reel.server.pickRun]
        1: Pick run… [reel.server.pickRun]
        "#);
    let at = Fixture::new(&text.replace("step a =", "step $0a ="));
    let hover = client.at("textDocument/hover", &uri, at.cursor(), json!({}));
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
    insta::assert_snapshot!(hints(&mut client, &uri, &text), @r#"
        // two runs
        flow pipeline {
          input n: int = 2

          step a = echo { ⟨✓ {"x":5}⟩
            value: { x: input.n }
          }

          step b = a.x + 1 ⟨✓ 6⟩

          output b
        }
        "#);

    // Bad arguments get an error that says what the command takes.
    let bad = execute(&mut client, "reel.server.listRuns", json!([]));
    insta::assert_snapshot!(bad["error"]["message"].as_str().unwrap_or_default(), @"`reel.server.listRuns` takes the document's URI and a flow name");
    let unknown = execute(&mut client, "reel.server.nope", json!([uri, "pipeline"]));
    insta::assert_snapshot!(unknown["error"]["message"].as_str().unwrap_or_default(), @"unknown command `reel.server.nope`; this server knows `reel.server.listRuns`, `reel.server.showRun`, `reel.server.pickRun`, `reel.server.run`, `reel.server.signal`, `reel.server.cancel`, `reel.server.resume`, `reel.server.previewFork`, `reel.server.stopPreview`, `reel.server.fork`");
    client.shutdown();
}

#[test]
fn a_run_with_an_unreadable_journal_row_still_shows_what_can_be_read() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("store");
    let path = dir.path().join("pipe.reel");
    std::fs::write(&path, PIPELINE).unwrap();
    let run: Value =
        serde_json::from_str(&reel(dir.path(), &home, &["run", "pipe.reel", "--json"])).unwrap();
    // Corrupt bytes in the row that started `a`'s call.
    let conn = rusqlite::Connection::open(home.join("reel.db")).unwrap();
    let changed = conn
        .execute(
            "UPDATE journal SET data = CAST(X'FFFE7B' AS TEXT) WHERE run = ?1 AND seq = 1",
            [run["run"].as_str().unwrap()],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(conn);
    let mut client = Client::start(dir.path(), &home);
    let uri = uri(&path);
    client.open(&uri, PIPELINE);
    let h = hints(&mut client, &uri, PIPELINE);
    assert!(h.contains("step b = a.x + 1 ⟨✓ 3⟩"), "{h}");
    assert!(h.contains(r#"step a = echo { ⟨✓ {"x":2}⟩"#), "{h}");
    client.shutdown();
}
