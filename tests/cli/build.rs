//! `reel build`: the FlowSpec of every example, choosing a flow, and the failures.

use std::fs;

use serde_json::Value;

use crate::support::*;

/// The flows a file declares, read from its top-level `flow NAME {` lines.
fn declared_flows(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("flow "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[test]
fn every_example_flow_builds() {
    let dir = temp();
    for example in examples() {
        let text = fs::read_to_string(&example).unwrap();
        for flow in declared_flows(&text) {
            let path = example.to_str().unwrap();
            let run = reel_in(dir.path(), &["build", path, "--flow", &flow]);
            assert_eq!(run.status, 0, "{path} {flow}: {}", run.stderr);
            let spec: Value = serde_json::from_str(&run.stdout).expect("the FlowSpec is JSON");
            assert_eq!(spec["name"], flow.as_str());
            assert_eq!(spec["span"]["file"], path);
        }
    }
}

#[test]
fn the_only_flow_needs_no_name_and_goes_to_a_file_with_o() {
    let dir = temp();
    write(dir.path(), "hello.reel", GOOD);
    let run = reel_in(dir.path(), &["build", "hello.reel", "-o", "out/hello.json"]);
    assert_eq!(run.status, 2, "the directory of OUT must exist");
    assert!(
        run.stderr
            .starts_with("error: cannot write `out/hello.json`")
    );

    let run = reel_in(dir.path(), &["build", "hello.reel", "-o", "hello.json"]);
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "");
    let written = fs::read_to_string(dir.path().join("hello.json")).unwrap();
    let spec: Value = serde_json::from_str(&written).unwrap();
    assert_eq!(spec["name"], "hello");

    let stdout = reel_in(dir.path(), &["build", "hello.reel"]);
    assert_eq!(stdout.status, 0);
    assert_eq!(stdout.stdout, written, "stdout and -o give the same text");
}

#[test]
fn a_file_with_errors_is_not_built() {
    let dir = temp();
    write(dir.path(), "broken.reel", SYNTAX_ERROR);
    let run = reel_in(dir.path(), &["build", "broken.reel", "-o", "out.json"]);
    assert_eq!(run.status, 1);
    assert_eq!(run.stdout, "");
    assert!(run.stderr.contains("syntax."), "{}", run.stderr);
    assert!(
        run.stderr.ends_with(
            "error: could not build `broken.reel` because of 1 error; fix them and build again\n"
        ),
        "{}",
        run.stderr
    );
    assert!(!dir.path().join("out.json").exists());
}

#[test]
fn several_flows_need_flow() {
    let dir = temp();
    write(dir.path(), "two.reel", TWO_FLOWS);
    let run = reel_in(dir.path(), &["build", "two.reel"]);
    assert_eq!(run.status, 2);
    assert_eq!(run.stdout, "");
    assert_eq!(
        run.stderr,
        "error: `two.reel` declares 2 flows; choose one with `--flow NAME`: `hello`, `bye`\n"
    );

    let chosen = reel_in(dir.path(), &["build", "two.reel", "--flow", "bye"]);
    assert_eq!(chosen.status, 0, "{}", chosen.stderr);
    let spec: Value = serde_json::from_str(&chosen.stdout).unwrap();
    assert_eq!(spec["name"], "bye");
}

#[test]
fn an_unknown_flow_is_named_with_a_suggestion() {
    let dir = temp();
    write(dir.path(), "two.reel", TWO_FLOWS);
    let run = reel_in(dir.path(), &["build", "two.reel", "--flow", "helo"]);
    assert_eq!(run.status, 2);
    assert_eq!(
        run.stderr,
        "error: `two.reel` has no flow named `helo`; did you mean `hello`? its flows: `hello`, `bye`\n"
    );
}

#[test]
fn a_file_without_flows_cannot_be_built() {
    let dir = temp();
    let tool = "tool t {\n  kind: \"pure\"\n  exec: [\"true\"]\n  input { x: string }\n  output { y: string }\n}\n";
    write(dir.path(), "tools.reel", tool);
    let run = reel_in(dir.path(), &["build", "tools.reel"]);
    assert_eq!(run.status, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .ends_with("error: `tools.reel` declares no flow; add one with `flow NAME { ... }`\n"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_missing_file_is_a_usage_error() {
    let dir = temp();
    let run = reel_in(dir.path(), &["build", "missing.reel"]);
    assert_eq!(run.status, 2);
    assert_eq!(
        run.stderr,
        "error: `missing.reel` does not exist; check the path\n"
    );
}

#[test]
fn a_reader_that_stops_early_is_not_an_error() {
    use std::io::Read;
    use std::process::Stdio;

    // Far more than a pipe holds, so the build is still writing when the reader goes away.
    let mut flow = String::from("flow long {\n  step s0 = echo { value: 0 }\n");
    for i in 1..400 {
        flow.push_str(&format!("  step s{i} = echo {{ value: s{} + 1 }}\n", i - 1));
    }
    flow.push_str("  output s399\n}\n");
    let dir = temp();
    write(dir.path(), "long.reel", &flow);
    let mut child = reel(dir.path(), &["build", "long.reel"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut head = [0u8; 16];
    child.stdout.take().unwrap().read_exact(&mut head).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(&head[..2], b"{\n");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}
