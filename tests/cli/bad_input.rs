//! Bad run input (issue 12): what a run does with input too deep, too large or not UTF-8. Each
//! gets a clear error or a bounded behaviour that `docs/reliability.md` states, and the store
//! stays usable.

use serde_json::Value;

use crate::support::*;

/// A `json` input echoed back as the output.
const ECHO_JSON: &str =
    "flow d {\n  input v: json\n  step e = echo { value: input.v }\n  output e\n}\n";

#[test]
fn json_nested_10000_levels_deep_is_refused_from_a_file_and_a_string_on_the_command_line() {
    let dir = temp();
    write(dir.path(), "d.reel", ECHO_JSON);
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    write(dir.path(), "deep.json", &format!("{{\"v\": {deep}}}"));
    let r = reel_in(
        dir.path(),
        &["run", "d.reel", "--inputs", "deep.json", "--json"],
    );
    assert_eq!(r.status, 2, "{r:?}");
    assert!(
        r.stderr
            .contains("`deep.json` is not JSON: recursion limit exceeded"),
        "{}",
        r.stderr
    );
    assert!(r.stdout.is_empty(), "nothing ran: {r:?}");
    // On the command line, a value that does not read as JSON is taken as a string.
    let arg = format!("v={deep}");
    let r = reel_in(dir.path(), &["run", "d.reel", "--input", &arg, "--json"]);
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert_eq!(json(&r)["output"], Value::String(deep));
    // The store still works.
    let r = reel_in(dir.path(), &["run", "d.reel", "--input", "v=[1]", "--json"]);
    assert_eq!(json(&r)["output"], serde_json::json!([1]));
}

#[test]
fn a_50_mib_string_input_runs_and_is_kept_apart() {
    let dir = temp();
    write(
        dir.path(),
        "b.reel",
        "flow b {\n  input s: string\n  step n = len(input.s)\n  output n\n}\n",
    );
    let big = serde_json::json!({ "s": "x".repeat(50 << 20) }).to_string();
    write(dir.path(), "big.json", &big);
    let r = reel_in(
        dir.path(),
        &["run", "b.reel", "--inputs", "big.json", "--json"],
    );
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert_eq!(json(&r)["output"], 50 << 20);
    // Over 64 KiB, a value is a file under blobs/, not a row of the database.
    let blobs = walk(&dir.path().join(".reel/blobs"));
    assert!(
        blobs.iter().any(|size| *size > 50 << 20),
        "the input is kept apart: {blobs:?}"
    );
    let r = reel_in(dir.path(), &["runs", "--json"]);
    assert_eq!(json(&r)[0]["status"], "succeeded");
}

/// The sizes of the files under `dir`.
fn walk(dir: &std::path::Path) -> Vec<u64> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else if let Ok(m) = path.metadata() {
            out.push(m.len());
        }
    }
    out
}

#[test]
fn bytes_of_a_tool_output_that_are_not_utf8_are_replaced() {
    let dir = temp();
    write(
        dir.path(),
        "u.reel",
        "flow u {\n  step x = exec { cmd: [\"sh\", \"-c\", \"printf '\\\\377\\\\376ok'\"] }\n  output x.stdout\n}\n",
    );
    let r = reel_in(dir.path(), &["run", "u.reel", "--json"]);
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert_eq!(json(&r)["output"], "\u{fffd}\u{fffd}ok");
}
