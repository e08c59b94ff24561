//! Quarantine: a resume that diverges from the run's own journal with the same flow is a fault
//! of the platform. A run is killed between an effect's start and its record (the tool kills
//! its `reel`, in `durable` mode, so the kill lands exactly there); resumed with a builtin's
//! result changed on purpose (`REEL_TEST_FAULT`, debug builds only), the call computes other
//! inputs, so its key would change: the effect is not made again and the run is quarantined
//! until `reel release` (try again) or `reel abandon` (give up).

use std::path::Path;

use crate::support::*;

/// A flow whose effect's arguments go through the builtin `upper`.
const FLOW: &str = "tool pay {\n  kind: \"effect\"\n  exec: [\"sh\", \"pay.sh\"]\n  input { who: string }\n  output { paid: int }\n}\n\nflow shop {\n  input who: string = \"ada\"\n  step pay = pay { who: upper(input.who) }\n  output pay.paid\n}\n";

const FAULT: (&str, &str) = ("REEL_TEST_FAULT", "builtin:upper");

fn killed_run(dir: &Path) -> String {
    write(dir, "flow.reel", FLOW);
    write(dir, "pay.sh", KILLING_PAY_SH);
    let _ = std::fs::remove_file(dir.join("fired"));
    let out = reel(
        dir,
        &["run", "flow.reel", "--durability", "durable", "--json"],
    )
    .output()
    .expect("reel starts");
    assert_eq!(out.status.code(), None, "reel was killed: {out:?}");
    let runs = json(&reel_in(dir, &["runs", "--json"]));
    assert_eq!(runs[0]["status"], "running", "{runs}");
    runs[0]["run"].as_str().unwrap().to_string()
}

fn status(dir: &Path, run: &str) -> String {
    let runs = json(&reel_in(dir, &["runs", "--json"]));
    runs.as_array()
        .unwrap()
        .iter()
        .find(|r| r["run"] == run)
        .map(|r| r["status"].as_str().unwrap().to_string())
        .unwrap()
}

#[test]
fn a_resume_that_diverges_is_quarantined_and_release_tries_again() {
    let dir = temp();
    let run = killed_run(dir.path());
    assert_eq!(calls(dir.path()).len(), 1);

    // The changed builtin: the call's inputs differ, so its key would; nothing is made again.
    let r = reel_env(dir.path(), &["resume", &run, "--json"], &[FAULT]);
    assert_eq!(r.status, 3, "{r:?}");
    assert_eq!(json(&r)["status"], "quarantined", "{r:?}");
    assert_eq!(json(&r)["error"]["code"], "run.diverged", "{r:?}");
    assert!(r.stderr.contains(&format!("reel release {run}")), "{r:?}");
    assert_eq!(calls(dir.path()).len(), 1, "the effect was not made again");
    let listed = json(&reel_in(
        dir.path(),
        &["runs", "--status", "quarantined", "--json"],
    ));
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["run"], run.as_str());

    // A quarantined run is not resumed, and a release with the fault still there quarantines
    // it again.
    let again = reel_in(dir.path(), &["resume", &run]);
    assert_eq!(again.status, 3, "{again:?}");
    let still = reel_env(dir.path(), &["release", &run, "--json"], &[FAULT]);
    assert_eq!(still.status, 3, "{still:?}");
    assert_eq!(calls(dir.path()).len(), 1);

    // Fixed: the release makes the call again with its first key, and the run ends.
    let fixed = reel_in(dir.path(), &["release", &run, "--json"]);
    assert_eq!(fixed.status, 0, "{fixed:?}");
    assert_eq!(json(&fixed)["output"], 5, "{fixed:?}");
    let keys = calls(dir.path());
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert_eq!(keys[0], keys[1], "made again with its first key");
    assert_eq!(status(dir.path(), &run), "succeeded");
    let r = reel_in(dir.path(), &["replay", &run, "--verify"]);
    assert_eq!(r.status, 0, "{r:?}");
}

#[test]
fn abandon_ends_a_quarantine_as_failed_and_neither_command_takes_another_run() {
    let dir = temp();
    let run = killed_run(dir.path());
    let r = reel_env(dir.path(), &["resume", &run], &[FAULT]);
    assert_eq!(r.status, 3, "{r:?}");
    let a = reel_in(dir.path(), &["abandon", &run, "--json"]);
    assert_eq!(a.status, 1, "{a:?}");
    assert_eq!(json(&a)["error"]["code"], "run.abandoned", "{a:?}");
    assert_eq!(status(dir.path(), &run), "failed");
    assert_eq!(calls(dir.path()).len(), 1, "nothing was made again");
    for command in ["release", "abandon"] {
        let r = reel_in(dir.path(), &[command, &run]);
        assert_eq!(r.status, 2, "{command}: {r:?}");
        assert!(r.stderr.contains("not quarantined"), "{command}: {r:?}");
    }
}
