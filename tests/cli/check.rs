//! `reel check`: the examples pass, diagnostics as text, JSON and SARIF, exit statuses, color.

use std::fs;

use serde_json::Value;

use crate::support::*;

#[test]
fn every_example_passes_on_its_own() {
    let dir = temp();
    for example in examples() {
        let run = reel_in(dir.path(), &["check", example.to_str().unwrap()]);
        assert_eq!(run.status, 0, "{}: {}", example.display(), run.stderr);
        assert_eq!(run.stdout, "", "{}", example.display());
        assert!(
            run.stderr.contains("checked 1 file: "),
            "{}: {}",
            example.display(),
            run.stderr
        );
    }
}

#[test]
fn the_examples_directory_passes() {
    let dir = temp();
    let run = reel_in(dir.path(), &["check", examples_dir().to_str().unwrap()]);
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "");
    let summary = format!("checked {} files: ", examples().len());
    assert!(run.stderr.contains(&summary), "{}", run.stderr);
}

#[test]
fn the_examples_have_no_errors_in_json() {
    let dir = temp();
    let examples = examples_dir();
    let run = reel_in(
        dir.path(),
        &["check", examples.to_str().unwrap(), "--format", "json"],
    );
    assert_eq!(run.status, 0, "{}", run.stderr);
    let diags: Vec<Value> = serde_json::from_str(&run.stdout).unwrap();
    assert!(
        diags.iter().all(|d| d["severity"] == "warning"),
        "{diags:?}"
    );
}

#[test]
fn a_syntax_error_as_json() {
    let dir = temp();
    write(dir.path(), "broken.reel", SYNTAX_ERROR);
    let run = reel_in(dir.path(), &["check", "broken.reel", "--format", "json"]);
    assert_eq!(run.status, 1);
    assert!(
        run.stderr.ends_with("checked 1 file: 1 error\n"),
        "{}",
        run.stderr
    );
    let diags: Value = serde_json::from_str(&run.stdout).expect("stdout is one JSON value");
    insta::assert_json_snapshot!(diags);
}

#[test]
fn json_gathers_every_file_in_one_array() {
    let dir = temp();
    write(dir.path(), "flows/a.reel", SYNTAX_ERROR);
    write(dir.path(), "flows/b.reel", GOOD);
    write(dir.path(), "flows/c/d.reel", SYNTAX_ERROR);
    let run = reel_in(dir.path(), &["check", "flows", "--format", "json"]);
    assert_eq!(run.status, 1);
    let diags: Vec<Value> = serde_json::from_str(&run.stdout).unwrap();
    let files: Vec<&str> = diags.iter().map(|d| d["file"].as_str().unwrap()).collect();
    assert_eq!(files, ["flows/a.reel", "flows/c/d.reel"]);
    assert!(
        run.stderr.ends_with("checked 3 files: 2 errors\n"),
        "{}",
        run.stderr
    );
}

#[test]
fn sarif_is_a_valid_sarif_2_1_0_log() {
    let dir = temp();
    write(dir.path(), "flows/broken.reel", SYNTAX_ERRORS);
    write(dir.path(), "flows/warn.reel", WARNING);
    let run = reel_in(dir.path(), &["check", "flows", "--format", "sarif"]);
    assert_eq!(run.status, 1, "{}", run.stderr);
    let log: Value = serde_json::from_str(&run.stdout).expect("stdout is one JSON value");

    // The published schema spells one language-tag pattern with a stray `]`, which JavaScript
    // regexes read as a literal and Rust's reject; the repaired pattern concerns only `language`
    // fields, which reel does not write.
    let schema_text = include_str!("../fixtures/sarif-2.1.0-rtm.5.json").replace(
        "^[a-zA-Z]{2}|^[a-zA-Z]{2}-[a-zA-Z]{2}]?$",
        "^[a-zA-Z]{2}$|^[a-zA-Z]{2}-[a-zA-Z]{2}$",
    );
    let schema: Value = serde_json::from_str(&schema_text).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the SARIF schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(&log)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "not valid SARIF 2.1.0: {errors:#?}");
    let mut broken = log.clone();
    broken["runs"][0]["results"][0]["level"] = "fatal".into();
    assert!(
        !validator.is_valid(&broken),
        "the schema does check results"
    );

    assert_eq!(log["version"], "2.1.0");
    assert_eq!(
        log["$schema"],
        "https://json.schemastore.org/sarif-2.1.0.json"
    );
    let runs = log["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1);
    let driver = &runs[0]["tool"]["driver"];
    assert_eq!(driver["name"], "reel");
    assert_eq!(driver["version"], env!("CARGO_PKG_VERSION"));
    let rules: Vec<&str> = driver["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    let results = runs[0]["results"].as_array().unwrap();
    assert!(!results.is_empty());
    let mut levels = Vec::new();
    for result in results {
        let rule = result["ruleId"].as_str().unwrap();
        assert!(rules.contains(&rule), "rule {rule} is declared");
        levels.push(result["level"].as_str().unwrap());
        let location = &result["locations"][0]["physicalLocation"];
        let uri = location["artifactLocation"]["uri"].as_str().unwrap();
        assert!(
            uri == "flows/broken.reel" || uri == "flows/warn.reel",
            "{uri}"
        );
        assert!(location["region"]["startLine"].as_u64().unwrap() >= 1);
        assert!(location["region"]["startColumn"].as_u64().unwrap() >= 1);
    }
    assert!(levels.contains(&"error") && levels.contains(&"warning"));
}

#[test]
fn warnings_pass_unless_denied() {
    let dir = temp();
    write(dir.path(), "warn.reel", WARNING);
    let allowed = reel_in(dir.path(), &["check", "warn.reel"]);
    assert_eq!(allowed.status, 0, "{}", allowed.stderr);
    assert!(allowed.stderr.contains("Warning"), "{}", allowed.stderr);
    assert!(allowed.stderr.ends_with("checked 1 file: 1 warning\n"));

    let denied = reel_in(dir.path(), &["check", "warn.reel", "--deny", "warnings"]);
    assert_eq!(denied.status, 1);
    assert!(
        denied
            .stderr
            .ends_with("checked 1 file: 1 warning (warnings denied)\n")
    );

    let json = reel_in(
        dir.path(),
        &[
            "check",
            "--deny",
            "warnings",
            "--format",
            "json",
            "warn.reel",
        ],
    );
    assert_eq!(json.status, 1);
    let diags: Vec<Value> = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(diags.len(), 1);
    assert_eq!(diags[0]["severity"], "warning");
}

#[test]
fn several_syntax_errors_rendered_for_people() {
    let dir = temp();
    write(dir.path(), "broken.reel", SYNTAX_ERRORS);
    let run = reel_in(dir.path(), &["check", "broken.reel"]);
    assert_eq!(run.status, 1);
    assert_eq!(run.stdout, "");
    assert!(!has_ansi(&run.stderr));
    insta::assert_snapshot!(run.stderr);
}

#[test]
fn a_missing_file_is_a_usage_error() {
    let dir = temp();
    let run = reel_in(dir.path(), &["check", "missing.reel"]);
    assert_eq!(run.status, 2);
    assert_eq!(run.stdout, "");
    assert_eq!(
        run.stderr,
        "error: `missing.reel` does not exist; check the path\n"
    );
}

#[test]
fn a_file_that_is_not_utf8_is_a_usage_error() {
    let dir = temp();
    fs::write(dir.path().join("binary.reel"), b"flow a {\xff}").unwrap();
    let run = reel_in(dir.path(), &["check", "binary.reel"]);
    assert_eq!(run.status, 2);
    assert!(
        run.stderr
            .starts_with("error: `binary.reel` is not UTF-8 text"),
        "{}",
        run.stderr
    );
}

#[cfg(unix)]
#[test]
fn an_unreadable_file_is_a_usage_error() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp();
    let path = write(dir.path(), "secret.reel", GOOD);
    fs::set_permissions(&path, fs::Permissions::from_mode(0o000)).unwrap();
    if fs::read(&path).is_ok() {
        // Running as root: permissions do not stop reading, so there is nothing to test.
        return;
    }
    let run = reel_in(dir.path(), &["check", "secret.reel"]);
    assert_eq!(run.status, 2);
    assert_eq!(
        run.stderr,
        "error: cannot read `secret.reel`: permission denied\n"
    );
}

#[test]
fn a_directory_without_reel_files_is_a_usage_error() {
    let dir = temp();
    write(dir.path(), "empty/notes.txt", "");
    let run = reel_in(dir.path(), &["check", "empty"]);
    assert_eq!(run.status, 2);
    assert!(
        run.stderr
            .starts_with("error: no .reel files in directory `empty`"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_file_that_is_not_reel_is_a_usage_error() {
    let dir = temp();
    write(dir.path(), "notes.txt", GOOD);
    let run = reel_in(dir.path(), &["check", "notes.txt"]);
    assert_eq!(run.status, 2);
    assert!(run.stderr.contains("`notes.txt` is not a .reel file"));
}

#[test]
fn every_bad_path_is_reported_before_anything_is_checked() {
    let dir = temp();
    write(dir.path(), "good.reel", GOOD);
    let run = reel_in(dir.path(), &["check", "good.reel", "a.reel", "b.reel"]);
    assert_eq!(run.status, 2);
    assert_eq!(
        run.stderr,
        "error: `a.reel` does not exist; check the path\n\
         error: `b.reel` does not exist; check the path\n"
    );
}

#[test]
fn bad_usage_exits_2() {
    let dir = temp();
    assert_eq!(reel_in(dir.path(), &["check"]).status, 2);
    assert_eq!(reel_in(dir.path(), &[]).status, 2);
    let bad_format = reel_in(dir.path(), &["check", "--format", "xml", "a.reel"]);
    assert_eq!(bad_format.status, 2);
    assert!(bad_format.stderr.starts_with("error: "));
}

#[test]
fn help_describes_the_command() {
    let dir = temp();
    let run = reel_in(dir.path(), &["check", "--help"]);
    assert_eq!(run.status, 0);
    for needle in ["Check Reel files", "--format", "--deny", "Exit status"] {
        assert!(run.stdout.contains(needle), "{needle} in {}", run.stdout);
    }
}

#[test]
fn no_color_is_honoured() {
    let dir = temp();
    write(dir.path(), "broken.reel", SYNTAX_ERROR);
    let check = |envs: &[(&str, &str)], args: &[&str]| {
        let mut command = reel(dir.path(), &[&["check", "broken.reel"], args].concat());
        command.envs(envs.iter().copied());
        run(command).stderr
    };
    // Tests run with stderr on a pipe; CLICOLOR_FORCE stands in for a terminal.
    assert!(has_ansi(&check(&[("CLICOLOR_FORCE", "1")], &[])));
    assert!(!has_ansi(&check(
        &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")],
        &[]
    )));
    assert!(has_ansi(&check(
        &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "")],
        &[]
    )));
    assert!(!has_ansi(&check(&[], &[])));
    assert!(has_ansi(&check(
        &[("NO_COLOR", "1")],
        &["--color", "always"]
    )));
    assert!(!has_ansi(&check(
        &[("CLICOLOR_FORCE", "1")],
        &["--color", "never"]
    )));
}

/// A file of one line a megabyte long (generated, minified, or not a flow at all): its
/// diagnostic was 7 MB on stderr, the token quoted whole in the message and the line drawn
/// whole with an underline as long; a 300 MB one took 1.2 GB to draw. Now the message quotes
/// the token's start and length, and the excerpt is named rather than drawn; a name of 100,000
/// characters is quoted by its start and end in the checker's messages too, in every format.
#[test]
fn a_line_of_a_megabyte_gets_a_diagnostic_a_person_can_read() {
    let dir = temp();
    write(dir.path(), "one.reel", &"a".repeat(1_000_000));
    let r = reel_in(dir.path(), &["check", "one.reel"]);
    assert_eq!(r.status, 1, "{}", &r.stderr[..r.stderr.len().min(2000)]);
    assert!(r.stderr.len() < 1_000, "{} bytes on stderr", r.stderr.len());
    assert!(
        r.stderr.contains(
            "one.reel:1:1: error[syntax.unexpected-token]: unexpected \
             `aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa…` (1000000 characters)"
        ),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("note: the line is 1000000 bytes long; its excerpt is left out"),
        "{}",
        r.stderr
    );

    let name = "b".repeat(100_000);
    write(
        dir.path(),
        "name.reel",
        &format!("flow a {{\n  step x = {name}\n  output x\n}}\n"),
    );
    let r = reel_in(dir.path(), &["check", "name.reel"]);
    assert_eq!(r.status, 1);
    assert!(r.stderr.len() < 3_000, "{} bytes on stderr", r.stderr.len());
    assert!(r.stderr.contains("characters left out]…"), "{}", r.stderr);
    let r = reel_in(dir.path(), &["check", "--format", "json", "name.reel"]);
    assert!(r.stdout.len() < 3_000, "{} bytes of JSON", r.stdout.len());
    let json: Value = serde_json::from_str(&r.stdout).unwrap();
    assert!(json.to_string().contains("characters left out]…"), "{json}");
}
