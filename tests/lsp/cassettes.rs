//! Cassettes in the editor: a hand-written cassette beside a flow is listed with the flow's runs,
//! and once picked its recorded results show inline (hints, hover, the lens) as a run's do; a
//! cassette that cannot be read is listed and, picked, says why in its lens.

use std::path::Path;

use serde_json::json;

use crate::runs::{execute, hints, lenses};
use crate::support::{Client, Fixture, redact, uri};

/// Waits for approval, then sleeps ten days before it writes a note (as `tests/cli/cassette.rs`).
const NAP: &str = "/// Waits for approval, then sleeps ten days before it writes a note.\nflow nap {\n  input who: string = \"Ada\"\n\n  step approval = signal {\n    name: \"approve\"\n    timeout: 30d\n  }\n\n  step rest = sleep {\n    for: 10d\n    after: [approval]\n  }\n\n  step note = echo {\n    value: { to: input.who, approved: approval.ok, woke_at: rest.woke_at }\n  }\n\n  output note\n}\n";

/// A run of `nap` written by hand; its `source` is relative to the cassette's folder.
const NAP_CASSETTE: &str = r#"{
  "cassette": 1,
  "flow": "nap",
  "source": "../nap.reel",
  "started_at": "2026-01-01T00:00:00Z",
  "inputs": { "who": "Ada" },
  "signals": [
    { "step": "approval", "name": "approve", "at": "2026-01-02T09:00:00Z", "payload": { "ok": true } }
  ],
  "timers": [ { "step": "rest", "until": "2026-01-12T09:00:00Z" } ],
  "calls": [
    {
      "step": "note",
      "tool": "echo",
      "at": "2026-01-12T09:00:01Z",
      "inputs": { "value": { "to": "Ada", "approved": true, "woke_at": "2026-01-12T09:00:00Z" } },
      "result": { "to": "Ada", "approved": true, "woke_at": "2026-01-12T09:00:00Z" }
    }
  ],
  "status": "succeeded",
  "output": { "to": "Ada", "approved": true, "woke_at": "2026-01-12T09:00:00Z" }
}
"#;

fn write(dir: &Path, rel: &str, text: &str) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// What `reel.server.listRuns` gives for `nap`, one a line.
fn listed(client: &mut Client, uri: &str) -> String {
    let listed = execute(client, "reel.server.listRuns", json!([uri, "nap"]));
    listed["result"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .map(|r| {
            format!(
                "{} [{}] {} {} · {} · started {} · detail: {}\n",
                r["id"].as_str().unwrap_or_default(),
                r["kind"].as_str().unwrap_or("run"),
                r["file"].as_str().unwrap_or("-"),
                r["status"].as_str().unwrap_or_default(),
                r["label"].as_str().unwrap_or_default(),
                r["started_at"].as_str().unwrap_or("-"),
                redact(r["detail"].as_str().unwrap_or("-")),
            )
        })
        .collect()
}

#[test]
fn a_cassette_beside_a_flow_is_listed_and_shown_inline_like_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("store");
    write(dir.path(), "reel.toml", "");
    write(dir.path(), "nap.reel", NAP);
    write(dir.path(), "tests/nap.cassette.json", NAP_CASSETTE);
    // Of another flow, and of another file: not this flow's.
    write(
        dir.path(),
        "tests/other.cassette.json",
        &NAP_CASSETTE.replace(r#""flow": "nap""#, r#""flow": "other""#),
    );
    write(
        dir.path(),
        "tests/elsewhere.cassette.json",
        &NAP_CASSETTE.replace("../nap.reel", "../gone.reel"),
    );
    let path = dir.path().join("nap.reel");
    let capabilities = json!({ "workspace": {
        "inlayHint": { "refreshSupport": true },
        "codeLens": { "refreshSupport": true },
    } });
    let mut client = Client::start_with(dir.path(), &home, capabilities);
    let uri = uri(&path);
    client.open(&uri, NAP);

    // No run yet, and no store: the cassette is listed all the same.
    insta::assert_snapshot!(listed(&mut client, &uri), @r#"cassette:tests/nap.cassette.json [cassette] nap.cassette.json succeeded · cassette tests/nap.cassette.json · started 2026-01-01T00:00:00Z · detail: cassette · recorded [time] · who: "Ada""#);
    assert_eq!(
        hints(&mut client, &uri, NAP),
        NAP,
        "nothing shown until picked"
    );

    let r = execute(
        &mut client,
        "reel.server.showRun",
        json!([uri, "nap", "cassette:tests/nap.cassette.json"]),
    );
    assert!(r.get("error").is_none(), "{r}");
    client.wait_for("workspace/inlayHint/refresh", |_| true);
    insta::assert_snapshot!(lenses(&mut client, &uri, &[]), @r#"
    1: ▶ Run nap [reel.server.run]
    1: Showing cassette tests/nap.cassette.json · succeeded · pinned [reel.server.pickRun]
    1: Pick run… [reel.server.pickRun]
    "#);
    insta::assert_snapshot!(hints(&mut client, &uri, NAP), @r#"
    /// Waits for approval, then sleeps ten days before it writes a note.
    flow nap {
      input who: string = "Ada"

      step approval = signal { ⟨✓ {"ok":true}⟩
        name: "approve"
        timeout: 30d
      }

      step rest = sleep { ⟨✓ {"woke_at":"2026-01-12T09:00:00Z"}⟩
        for: 10d
        after: [approval]
      }

      step note = echo { ⟨✓ {"approved":true,"to":"Ada","woke_at":"2…⟩
        value: { to: input.who, approved: approval.ok, woke_at: rest.woke_at }
      }

      output note
    }
    "#);

    // Hover on a step adds what the cassette recorded for it.
    let at = Fixture::new(&NAP.replace("step note =", "step $0note ="));
    let hover = client.at("textDocument/hover", &uri, at.cursor(), json!({}));
    let text = hover["result"]["contents"]["value"]
        .as_str()
        .unwrap_or_default();
    let recorded = text.split("---").last().unwrap_or_default();
    insta::assert_snapshot!(recorded, @r#"


    **Cassette `tests/nap.cassette.json`** (succeeded)

    Output:
    ```json
    {
      "approved": true,
      "to": "Ada",
      "woke_at": "2026-01-12T09:00:00Z"
    }
    ```

    Took 0ms

    Attempts:
    - attempt 1 at 09:00:01
    "#);

    // A cassette records no digests of the steps it ran: its results are read against the text
    // as it last built: while it does not build, only what changed since is marked.
    let broken = NAP.replace("to: input.who", "to: input.whom");
    client.change(&uri, 2, &broken);
    insta::assert_snapshot!(hints(&mut client, &uri, &broken), @r#"
    /// Waits for approval, then sleeps ten days before it writes a note.
    flow nap {
      input who: string = "Ada"

      step approval = signal { ⟨✓ {"ok":true}⟩
        name: "approve"
        timeout: 30d
      }

      step rest = sleep { ⟨✓ {"woke_at":"2026-01-12T09:00:00Z"}⟩
        for: 10d
        after: [approval]
      }

      step note = echo { ⟨(?) ✓ {"approved":true,"to":"Ada","woke_at…⟩
        value: { to: input.whom, approved: approval.ok, woke_at: rest.woke_at }
      }

      output note
    }
    "#);
    client.change(&uri, 3, NAP);

    // A cassette that is not there, or of another flow, is refused with why.
    let r = execute(
        &mut client,
        "reel.server.showRun",
        json!([uri, "nap", "cassette:tests/other.cassette.json"]),
    );
    insta::assert_snapshot!(r["error"]["message"].as_str().unwrap_or_default(), @"cassette `tests/other.cassette.json` is not of flow `nap` of this file");
    let r = execute(
        &mut client,
        "reel.server.showRun",
        json!([uri, "nap", "cassette:../nap.cassette.json"]),
    );
    insta::assert_snapshot!(r["error"]["message"].as_str().unwrap_or_default(), @"`cassette:../nap.cassette.json` is not a cassette of this project: give `cassette:PATH.cassette.json`, PATH relative to the project's folder");

    // Following the latest run again: there is none.
    execute(
        &mut client,
        "reel.server.showRun",
        json!([uri, "nap", null]),
    );
    assert_eq!(hints(&mut client, &uri, NAP), NAP);
    client.shutdown();
}

#[test]
fn a_cassette_that_cannot_be_read_is_listed_and_its_lens_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("store");
    write(dir.path(), "nap.reel", NAP);
    write(
        dir.path(),
        "nap.cassette.json",
        &NAP_CASSETTE
            .replace("../nap.reel", "nap.reel")
            .replace("2026-01-02T09:00:00Z", "the next morning"),
    );
    // Not JSON at all, beside the flow: it may be this flow's, so it is listed too.
    write(
        dir.path(),
        "torn.cassette.json",
        "{ \"cassette\": 1, \"flow\": \"na",
    );
    let path = dir.path().join("nap.reel");
    let mut client = Client::start(dir.path(), &home);
    let uri = uri(&path);
    client.open(&uri, NAP);
    insta::assert_snapshot!(listed(&mut client, &uri), @r#"
    cassette:nap.cassette.json [cassette] nap.cassette.json unreadable · cassette nap.cassette.json · started - · detail: cassette · cannot be read: `signals[].at` is not a time in RFC 3339 (`2026-12-01T09:30:00Z`): `the next morning`
    cassette:torn.cassette.json [cassette] torn.cassette.json unreadable · cassette torn.cassette.json · started - · detail: cassette · cannot be read: not JSON: EOF while parsing a string at line 1 column 28
    "#);

    for (id, n) in [
        ("cassette:nap.cassette.json", 1),
        ("cassette:torn.cassette.json", 2),
    ] {
        let r = execute(&mut client, "reel.server.showRun", json!([uri, "nap", id]));
        assert!(r.get("error").is_none(), "{r}");
        let shown = lenses(&mut client, &uri, &[]);
        insta::assert_snapshot!(format!("unreadable_lens_{n}"), shown);
        // Nothing to show inline, and nothing breaks: hints and hover still answer.
        assert_eq!(hints(&mut client, &uri, NAP), NAP);
        let at = Fixture::new(&NAP.replace("step note =", "step $0note ="));
        let hover = client.at("textDocument/hover", &uri, at.cursor(), json!({}));
        assert!(hover.get("error").is_none(), "{hover}");
    }
    client.shutdown();
}
