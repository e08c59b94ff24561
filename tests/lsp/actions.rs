//! The editor's actions as a client that is not VS Code uses them: each lens runs a command the
//! server executes (`workspace/executeCommand`), and the server starts `reel` for it. A lens
//! runs a flow and its results appear; a lens sends a waiting run its signal and the run
//! finishes; a lens cancels a run; after a failed run and an edit, the fork preview marks each
//! step (reused, live, new) and follows the text as it changes, and the fork's results appear.
//! Lenses are shown as `line: title [command]`, hints written into the source (see `support`).

use std::path::Path;

use serde_json::{Value, json};

use crate::runs::{PIPELINE, execute, hints, lenses, name_runs, reel};
use crate::support::{Client, redact, uri};

/// A client that follows runs live: it lets the server ask for new hints and lenses.
fn live_client(dir: &Path, home: &Path) -> Client {
    let capabilities = json!({ "workspace": {
        "inlayHint": { "refreshSupport": true },
        "codeLens": { "refreshSupport": true },
    } });
    Client::start_with(dir, home, capabilities)
}

/// Runs the command of the lens whose title starts with `title`, with its own arguments and
/// then `extra`; the whole answer.
fn click(client: &mut Client, uri: &str, title: &str, extra: &[Value]) -> Value {
    let r = client.request(
        "textDocument/codeLens",
        json!({ "textDocument": { "uri": uri } }),
    );
    let lens = r["result"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|l| {
            l["command"]["title"]
                .as_str()
                .is_some_and(|t| t.starts_with(title))
        })
        .unwrap_or_else(|| panic!("no lens `{title}` in {r}"))
        .clone();
    let mut args = lens["command"]["arguments"].as_array().cloned().unwrap();
    args.extend(extra.iter().cloned());
    let command = lens["command"]["command"].as_str().unwrap();
    execute(client, command, Value::Array(args))
}

/// The hints of `uri` once `done` holds of them, waiting for the server's refreshes meanwhile.
/// A duration, shown only when a step took long enough, is left out: it depends on the load.
fn hints_until(client: &mut Client, uri: &str, text: &str, done: impl Fn(&str) -> bool) -> String {
    for _ in 0..40 {
        let h = hints(client, uri, text).replace(" · [took]", "");
        if done(&h) {
            return h;
        }
        client.wait_for("workspace/inlayHint/refresh", |_| true);
    }
    panic!("the hints never got there: {}", hints(client, uri, text));
}

/// The lenses of `uri` once `done` holds of them, waiting for the server's refreshes meanwhile.
fn lenses_until(
    client: &mut Client,
    uri: &str,
    runs: &[(&str, &str)],
    done: impl Fn(&str) -> bool,
) -> String {
    for _ in 0..40 {
        let l = lenses(client, uri, runs);
        if done(&l) {
            return l;
        }
        client.wait_for("workspace/codeLens/refresh", |_| true);
    }
    panic!("the lenses never got there: {}", lenses(client, uri, runs));
}

/// The id of the latest run of the store in `home`, from `reel runs --json`.
fn latest_run(dir: &Path, home: &Path) -> String {
    let runs: Value = serde_json::from_str(&reel(dir, home, &["runs", "--json"])).unwrap();
    let first = runs.as_array().and_then(|r| r.first()).cloned();
    first
        .and_then(|r| r["run"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("no run in {runs}"))
}

#[test]
fn a_lens_runs_the_flow_and_its_results_appear() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("store");
    let path = dir.path().join("pipe.reel");
    std::fs::write(&path, PIPELINE).unwrap();
    let mut client = live_client(dir.path(), &home);
    let uri = uri(&path);
    client.open(&uri, PIPELINE);
    insta::assert_snapshot!(lenses(&mut client, &uri, &[]), @r"
    0: ▶ Run pipeline [reel.server.run]
    0: No runs yet [reel.server.pickRun]
    0: Pick run… [reel.server.pickRun]
    ");

    let r = click(&mut client, &uri, "▶ Run", &[]);
    let log = r["result"]["log"].as_str().unwrap_or_else(|| panic!("{r}"));
    let h = hints_until(&mut client, &uri, PIPELINE, |h| h.contains("⟨✓ 3⟩"));
    insta::assert_snapshot!(h, @r#"
    flow pipeline {
      input n: int = 2

      step a = echo { ⟨✓ {"x":2}⟩
        value: { x: input.n }
      }

      step b = a.x + 1 ⟨✓ 3⟩

      output b
    }
    "#);
    // What `reel run` printed is in the log the command answered with.
    let printed = std::fs::read_to_string(log).unwrap();
    assert!(printed.contains("of `pipeline`"), "{printed}");

    // A client without a run picker of its own is offered the runs as a message's buttons.
    let run = latest_run(dir.path(), &home);
    let runs = [(run.as_str(), "[run]")];
    let r = click(&mut client, &uri, "Pick run…", &[]);
    let asked = client.wait_for("window/showMessageRequest", |_| true);
    let buttons: Vec<String> = asked["actions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| redact(a["title"].as_str().unwrap_or_default()))
        .collect();
    insta::assert_snapshot!(name_runs(&format!("{}\n{}", asked["message"], buttons.join("\n")), &runs), @r#"
    "Show which run of `pipeline` beside its steps?"
    Follow the latest run
    [run] · succeeded · [age]
    "#);
    // This client answered nothing: nothing changes.
    assert_eq!(r["result"], Value::Null, "{r}");
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
fn a_lens_sends_a_waiting_run_its_signal_and_the_run_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("store");
    let path = dir.path().join("wait.reel");
    std::fs::write(&path, WAITER).unwrap();
    let mut client = live_client(dir.path(), &home);
    let uri = uri(&path);
    client.open(&uri, WAITER);
    click(&mut client, &uri, "▶ Run", &[]);
    hints_until(&mut client, &uri, WAITER, |h| h.contains("⏸ waiting"));
    let run = latest_run(dir.path(), &home);
    let runs = [(run.as_str(), "[run]")];
    insta::assert_snapshot!(lenses_until(&mut client, &uri, &runs, |l| l.contains("waiting")), @r"
    0: ▶ Run waiter [reel.server.run]
    0: Showing run [run] · waiting · [age] [reel.server.pickRun]
    0: Pick run… [reel.server.pickRun]
    0: ✉ Send signal `go` [reel.server.signal]
    0: ■ Cancel [reel.server.cancel]
    ");

    // The lens names the run and the signal; the client adds the payload.
    let r = click(&mut client, &uri, "✉ Send signal", &[json!({ "ok": true })]);
    let (log, cwd) = (&r["result"]["log"], &r["result"]["cwd"]);
    let (log, cwd) = (log.as_str().unwrap_or("-"), cwd.as_str().unwrap_or("-"));
    let answer = r["result"]
        .to_string()
        .replace(log, "[log]")
        .replace(cwd, "[dir]");
    assert_eq!(
        name_runs(&answer, &runs),
        r#"{"command":["reel","resume","[run]"],"cwd":"[dir]","log":"[log]","run":"[run]","signal":"go"}"#
    );
    let h = hints_until(&mut client, &uri, WAITER, |h| h.contains("⟨✓"));
    insta::assert_snapshot!(h, @r#"
    flow waiter {
      step go = signal { ⟨✓ {"ok":true}⟩
        name: "go"
      }

      output go
    }
    "#);
    insta::assert_snapshot!(lenses_until(&mut client, &uri, &runs, |l| l.contains("succeeded")), @r"
    0: ▶ Run waiter [reel.server.run]
    0: Showing run [run] · succeeded · [age] [reel.server.pickRun]
    0: Pick run… [reel.server.pickRun]
    ");
    client.shutdown();
}

#[test]
fn lenses_cancel_and_resume_a_run_and_a_refused_command_is_shown_with_reels_message() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("store");
    let path = dir.path().join("wait.reel");
    std::fs::write(&path, WAITER).unwrap();
    let mut client = live_client(dir.path(), &home);
    let uri = uri(&path);
    client.open(&uri, WAITER);
    click(&mut client, &uri, "▶ Run", &[]);
    hints_until(&mut client, &uri, WAITER, |h| h.contains("⏸ waiting"));
    let run = latest_run(dir.path(), &home);
    let runs = [(run.as_str(), "[run]")];

    let r = click(&mut client, &uri, "■ Cancel", &[]);
    assert!(r.get("error").is_none(), "{r}");
    insta::assert_snapshot!(lenses_until(&mut client, &uri, &runs, |l| l.contains("canceled")), @r"
    0: ▶ Run waiter [reel.server.run]
    0: Showing run [run] · canceled · [age] [reel.server.pickRun]
    0: Pick run… [reel.server.pickRun]
    0: ↻ Resume [reel.server.resume]
    ");

    // Resumed, the canceled run is redriven: it waits for its signal again.
    let r = click(&mut client, &uri, "↻ Resume", &[]);
    assert!(r["result"]["log"].is_string(), "{r}");
    lenses_until(&mut client, &uri, &runs, |l| l.contains("· waiting"));
    click(&mut client, &uri, "■ Cancel", &[]);
    lenses_until(&mut client, &uri, &runs, |l| l.contains("· canceled"));

    // A signal to the ended run: `reel signal` refuses, and the client is told why.
    let r = execute(
        &mut client,
        "reel.server.signal",
        json!([uri, "waiter", run, "go", "late"]),
    );
    let said = client.wait_for("window/showMessage", |_| true);
    insta::assert_snapshot!(name_runs(&said["message"].to_string(), &runs), @r#""Reel: run [run] has ended (canceled); a signal would never be taken""#);
    assert_eq!(said["type"], 1, "an error: {said}");
    assert_eq!(
        name_runs(r["error"]["message"].as_str().unwrap_or_default(), &runs),
        "run [run] has ended (canceled); a signal would never be taken"
    );
    client.shutdown();
}

/// A flow whose last step fails (`to_int` of a word): the first step's call is worth reusing.
const FAILING: &str = r#"flow order {
  input item: string = "book"

  step charge = echo {
    value: { charged: input.item }
  }

  step count = to_int(charge.charged)

  output count
}
"#;

#[test]
fn a_fork_preview_marks_each_step_follows_the_edits_and_the_fork_shows_inline() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("store");
    let path = dir.path().join("order.reel");
    std::fs::write(&path, FAILING).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_reel"))
        .args(["run", "order.reel", "--json"])
        .current_dir(dir.path())
        .env("REEL_HOME", &home)
        .output()
        .unwrap();
    let failed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(failed["status"], "failed", "{failed}");
    let parent = failed["run"].as_str().unwrap().to_string();
    let mut runs = vec![(parent.as_str(), "[failed]")];

    let mut client = live_client(dir.path(), &home);
    let uri = uri(&path);
    client.open(&uri, FAILING);
    // A failed run: it can be resumed, or forked with a fix.
    insta::assert_snapshot!(lenses(&mut client, &uri, &runs), @r"
    0: ▶ Run order [reel.server.run]
    0: Showing run [failed] · failed · [age] [reel.server.pickRun]
    0: Pick run… [reel.server.pickRun]
    0: ↻ Resume [reel.server.resume]
    0: Preview fork [reel.server.previewFork]
    0: Fork with these changes [reel.server.fork]
    ");

    // The same two as code actions, anywhere in the flow.
    let r = client.request(
        "textDocument/codeAction",
        json!({
            "textDocument": { "uri": uri },
            "range": { "start": { "line": 7, "character": 4 }, "end": { "line": 7, "character": 4 } },
            "context": { "diagnostics": [] },
        }),
    );
    let actions: Vec<String> = r["result"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            format!(
                "{} [{}]",
                a["title"].as_str().unwrap_or_default(),
                a["command"]["command"].as_str().unwrap_or_default()
            )
        })
        .collect();
    assert_eq!(
        actions,
        [
            "Preview fork [reel.server.previewFork]",
            "Fork with these changes [reel.server.fork]"
        ],
        "{r}"
    );

    // The fix, not saved yet: the step counts letters, and a new step reports.
    let fixed = FAILING
        .replace("to_int(charge.charged)", "len(charge.charged)")
        .replace(
            "  output count",
            "  step report = echo {\n    value: count\n  }\n\n  output report",
        );
    client.change(&uri, 2, &fixed);
    let r = click(&mut client, &uri, "Preview fork", &[]);
    insta::assert_snapshot!(name_runs(&serde_json::to_string_pretty(&r["result"]).unwrap(), &runs), @r#"
    {
      "parent": "[failed]",
      "steps": [
        {
          "mark": "reused",
          "reason": null,
          "step": "charge"
        },
        {
          "mark": "live",
          "reason": "failed in the parent; changed expression",
          "step": "count"
        },
        {
          "mark": "new",
          "reason": null,
          "step": "report"
        }
      ]
    }
    "#);
    insta::assert_snapshot!(lenses(&mut client, &uri, &runs), @r"
    0: ▶ Run order [reel.server.run]
    0: Showing run [failed] · failed · [age] [reel.server.pickRun]
    0: Pick run… [reel.server.pickRun]
    0: ↻ Resume [reel.server.resume]
    0: Fork preview: 1 reused · 1 live · 1 new [reel.server.previewFork]
    0: Stop fork preview [reel.server.stopPreview]
    0: Fork with these changes [reel.server.fork]
    3: ✓ reused from run [failed] [reel.server.previewFork]
    7: ↻ runs live: failed in the parent; changed expression [reel.server.previewFork]
    9: + new: runs live [reel.server.previewFork]
    ");

    // Typing on: the charge changes too. The preview follows the text by itself.
    let typed = fixed.replace("charged: input.item", "charged: input.item, twice: true");
    client.change(&uri, 3, &typed);
    let l = lenses_until(&mut client, &uri, &runs, |l| l.contains("0 reused"));
    insta::assert_snapshot!(l, @r"
    0: ▶ Run order [reel.server.run]
    0: Showing run [failed] · failed · [age] [reel.server.pickRun]
    0: Pick run… [reel.server.pickRun]
    0: ↻ Resume [reel.server.resume]
    0: Fork preview: 0 reused · 2 live · 1 new [reel.server.previewFork]
    0: Stop fork preview [reel.server.stopPreview]
    0: Fork with these changes [reel.server.fork]
    3: ↻ runs live: changed arguments [reel.server.previewFork]
    7: ↻ runs live: waits for upstream step `charge`, which runs live [reel.server.previewFork]
    9: + new: runs live [reel.server.previewFork]
    ");

    // A mistake while typing: `reel` would refuse the text, so the preview says so and waits.
    let broken = typed.replace("len(charge.charged)", "len(charge.charge)");
    client.change(&uri, 4, &broken);
    let l = lenses(&mut client, &uri, &runs);
    assert!(
        l.contains("0: Fork preview: fix the errors in the text first [reel.server.previewFork]"),
        "{l}"
    );

    // Back to the fix, saved, and forked: the fork's results appear inline, the preview is off.
    client.change(&uri, 5, &fixed);
    std::fs::write(&path, &fixed).unwrap();
    let r = click(&mut client, &uri, "Fork with these changes", &[]);
    assert!(r.get("error").is_none(), "{r}");
    let h = hints_until(&mut client, &uri, &fixed, |h| {
        h.contains("step report = echo { ⟨✓")
    });
    let fork = latest_run(dir.path(), &home);
    runs.push((fork.as_str(), "[fork]"));
    insta::assert_snapshot!(h, @r#"
    flow order {
      input item: string = "book"

      step charge = echo { ⟨✓ {"charged":"book"}⟩
        value: { charged: input.item }
      }

      step count = len(charge.charged) ⟨✓ 4⟩

      step report = echo { ⟨✓ 4⟩
        value: count
      }

      output report
    }
    "#);
    insta::assert_snapshot!(lenses_until(&mut client, &uri, &runs, |l| l.contains("succeeded")), @r"
    0: ▶ Run order [reel.server.run]
    0: Showing run [fork] · succeeded · [age] [reel.server.pickRun]
    0: Pick run… [reel.server.pickRun]
    ");
    // The fork reused the charge: it is the parent's event, not a new call.
    let events = reel(dir.path(), &home, &["events", &fork, "--json"]);
    assert!(events.contains("reused"), "{events}");
    client.shutdown();
}
