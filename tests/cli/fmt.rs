//! `reel fmt`: in place, `--check`, stdin, and files it must not touch.

use std::fs;

use crate::support::*;

/// A well-formed flow written carelessly: odd indentation and spacing.
const UNFORMATTED: &str =
    "flow   hello{\ninput name:string=\"world\"\n      output   \"hello, ${input.name}\"\n}\n\n\n";

#[test]
fn check_fails_on_an_unformatted_file_and_passes_after_fmt() {
    let dir = temp();
    let path = write(dir.path(), "hello.reel", UNFORMATTED);

    let check = reel_in(dir.path(), &["fmt", "--check", "hello.reel"]);
    assert_eq!(check.status, 1, "{}", check.stderr);
    assert_eq!(check.stdout, "");
    assert!(
        check.stderr.contains("would reformat hello.reel\n"),
        "{}",
        check.stderr
    );
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        UNFORMATTED,
        "--check writes nothing"
    );

    let fmt = reel_in(dir.path(), &["fmt", "hello.reel"]);
    assert_eq!(fmt.status, 0, "{}", fmt.stderr);
    assert_eq!(fmt.stdout, "");
    let formatted = fs::read_to_string(&path).unwrap();
    assert_ne!(formatted, UNFORMATTED);

    let again = reel_in(dir.path(), &["fmt", "--check", "hello.reel"]);
    assert_eq!(again.status, 0, "{}", again.stderr);
    let leftovers: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "no temporary file is left behind");

    let checked = reel_in(dir.path(), &["check", "hello.reel"]);
    assert_eq!(
        checked.status, 0,
        "the formatted file still checks: {}",
        checked.stderr
    );
}

#[test]
fn the_examples_are_formatted() {
    let dir = temp();
    let run = reel_in(
        dir.path(),
        &["fmt", "--check", examples_dir().to_str().unwrap()],
    );
    assert_eq!(run.status, 0, "{}", run.stderr);
}

#[test]
fn a_file_with_syntax_errors_is_left_byte_identical() {
    let dir = temp();
    let path = write(dir.path(), "broken.reel", SYNTAX_ERRORS);
    let ugly = write(dir.path(), "ugly.reel", UNFORMATTED);
    let run = reel_in(dir.path(), &["fmt", "broken.reel", "ugly.reel"]);
    assert_eq!(run.status, 1);
    assert_eq!(fs::read(&path).unwrap(), SYNTAX_ERRORS.as_bytes());
    assert!(run.stderr.contains("broken.reel:"), "{}", run.stderr);
    assert!(run.stderr.contains("Error"), "{}", run.stderr);
    assert_ne!(
        fs::read_to_string(&ugly).unwrap(),
        UNFORMATTED,
        "the other file is still formatted"
    );
    assert!(
        run.stderr.ends_with(
            "1 file reformatted, 0 files already formatted, 1 file not formatted (syntax errors)\n"
        ),
        "{}",
        run.stderr
    );
}

#[test]
fn stdin_is_formatted_to_stdout() {
    let dir = temp();
    let path = write(dir.path(), "hello.reel", UNFORMATTED);
    let piped = run_with_stdin(reel(dir.path(), &["fmt", "-"]), UNFORMATTED);
    assert_eq!(piped.status, 0, "{}", piped.stderr);
    assert_eq!(reel_in(dir.path(), &["fmt", "hello.reel"]).status, 0);
    assert_eq!(piped.stdout, fs::read_to_string(&path).unwrap());

    let check = run_with_stdin(reel(dir.path(), &["fmt", "--check", "-"]), UNFORMATTED);
    assert_eq!(check.status, 1);
    assert_eq!(check.stdout, "");
}

#[test]
fn stdin_with_syntax_errors_prints_nothing_on_stdout() {
    let dir = temp();
    let run = run_with_stdin(reel(dir.path(), &["fmt", "-"]), SYNTAX_ERROR);
    assert_eq!(run.status, 1);
    assert_eq!(run.stdout, "");
    assert!(run.stderr.contains("<stdin>:"), "{}", run.stderr);
}

#[test]
fn stdin_cannot_be_mixed_with_paths() {
    let dir = temp();
    write(dir.path(), "hello.reel", UNFORMATTED);
    let run = reel_in(dir.path(), &["fmt", "-", "hello.reel"]);
    assert_eq!(run.status, 2);
    assert!(run.stderr.starts_with("error: `-` (standard input)"));
}

#[test]
fn a_missing_file_changes_nothing() {
    let dir = temp();
    let path = write(dir.path(), "hello.reel", UNFORMATTED);
    let run = reel_in(dir.path(), &["fmt", "hello.reel", "missing.reel"]);
    assert_eq!(run.status, 2);
    assert_eq!(fs::read_to_string(&path).unwrap(), UNFORMATTED);
}

#[test]
fn directories_are_formatted_recursively() {
    let dir = temp();
    let a = write(dir.path(), "flows/a.reel", UNFORMATTED);
    let b = write(dir.path(), "flows/deep/b.reel", UNFORMATTED);
    let run = reel_in(dir.path(), &["fmt", "flows"]);
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert!(
        run.stderr
            .ends_with("2 files reformatted, 0 files already formatted\n")
    );
    assert_ne!(fs::read_to_string(a).unwrap(), UNFORMATTED);
    assert_ne!(fs::read_to_string(b).unwrap(), UNFORMATTED);
}

#[test]
fn a_file_saved_with_a_byte_order_mark_checks_runs_and_keeps_its_mark_through_fmt() {
    let dir = temp();
    let bom = "\u{feff}";
    // As Windows editors may save it: a byte order mark and CRLF line ends.
    let path = write(
        dir.path(),
        "hello.reel",
        &format!("{bom}{}", UNFORMATTED.replace('\n', "\r\n")),
    );
    let check = reel_in(dir.path(), &["check", "hello.reel"]);
    assert_eq!(check.status, 0, "{}", check.stderr);
    let run = reel_in(dir.path(), &["run", "hello.reel"]);
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "\"hello, world\"\n");

    let fmt = reel_in(dir.path(), &["fmt", "hello.reel"]);
    assert_eq!(fmt.status, 0, "{}", fmt.stderr);
    let formatted = fs::read_to_string(&path).unwrap();
    assert!(formatted.starts_with(bom), "{formatted:?}");
    assert!(
        !formatted[bom.len()..].contains('\u{feff}'),
        "{formatted:?}"
    );
    let again = reel_in(dir.path(), &["fmt", "--check", "hello.reel"]);
    assert_eq!(again.status, 0, "{}", again.stderr);

    // A diagnostic's columns are an editor's, which does not show the mark.
    write(
        dir.path(),
        "bad.reel",
        &format!("{bom}flow f {{\n  output nope\n}}\n"),
    );
    let bad = reel_in(dir.path(), &["check", "bad.reel"]);
    assert_eq!(bad.status, 1, "{}", bad.stderr);
    assert!(bad.stderr.contains("bad.reel:2:10"), "{}", bad.stderr);
}
