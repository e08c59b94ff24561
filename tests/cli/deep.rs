//! Deeply nested expressions: the deepest the nesting limit admits goes through `check`,
//! `build`, `fmt` and `run`; anything deeper is one `syntax.too-deep` error from each command
//! that reads the file, never a crash (a stack overflow used to abort `reel` at about 6,400
//! terms of a sum, 4,100 nested calls or 43,000 nested parentheses).

use serde_json::{Value, json};

use crate::support::*;

/// `reel_syntax::nesting::MAX_NESTING`.
const MAX: usize = 128;

/// A flow whose step `s` is `expr` and whose output is `s`.
fn flow(expr: &str) -> String {
    format!("flow deep {{\n  step s = {expr}\n  output s\n}}\n")
}

fn sum(terms: usize) -> String {
    format!("1{}", " + 1".repeat(terms - 1))
}

fn lists(n: usize) -> String {
    format!("{}1{}", "[".repeat(n), "]".repeat(n))
}

fn records(n: usize) -> String {
    format!("{}1{}", "{ a: ".repeat(n), " }".repeat(n))
}

/// The value `lists(n)` and `records(n)` evaluate to.
fn nested(n: usize, wrap: fn(Value) -> Value) -> Value {
    (0..n).fold(json!(1), |v, _| wrap(v))
}

fn run_flow(dir: &std::path::Path, file: &str) -> Run {
    let home = dir.join(".reel").display().to_string();
    reel_env(dir, &["run", file], &[("REEL_HOME", &home)])
}

#[test]
fn the_deepest_admitted_expressions_check_build_format_and_run() {
    let cases = [
        // The sum's root and its `MAX - 1` additions.
        (sum(MAX), json!(MAX)),
        (lists(MAX - 1), nested(MAX - 1, |v| json!([v]))),
        (records(MAX - 1), nested(MAX - 1, |v| json!({ "a": v }))),
    ];
    for (expr, value) in cases {
        let dir = temp();
        write(dir.path(), "deep.reel", &flow(&expr));
        let check = reel_in(dir.path(), &["check", "deep.reel"]);
        assert_eq!(check.status, 0, "{}", check.stderr);
        let build = reel_in(dir.path(), &["build", "deep.reel"]);
        assert_eq!(build.status, 0, "{}", build.stderr);
        let fmt = reel_in(dir.path(), &["fmt", "deep.reel"]);
        assert_eq!(fmt.status, 0, "{}", fmt.stderr);
        let run = run_flow(dir.path(), "deep.reel");
        assert_eq!(run.status, 0, "{}", run.stderr);
        assert_eq!(json(&run), value);
    }
}

#[test]
fn one_level_deeper_is_one_error_from_every_command() {
    for expr in [sum(MAX + 1), lists(MAX), records(MAX)] {
        let dir = temp();
        write(dir.path(), "deep.reel", &flow(&expr));
        for args in [
            &["check", "deep.reel"][..],
            &["build", "deep.reel"],
            &["fmt", "deep.reel"],
            &["run", "deep.reel"],
        ] {
            let home = dir.path().join(".reel").display().to_string();
            let r = reel_env(dir.path(), args, &[("REEL_HOME", &home)]);
            assert_eq!(r.status, 1, "{args:?}: {}", r.stderr);
            assert_eq!(
                r.stderr.matches("syntax.too-deep").count(),
                1,
                "{args:?}: {}",
                r.stderr
            );
            assert!(r.stderr.contains("deeper than 128 levels"), "{}", r.stderr);
        }
    }
}

#[test]
fn the_sizes_that_used_to_overflow_the_stack_are_refused() {
    let sizes = [
        sum(6_400),
        format!("{}1{}", "to_int(".repeat(4_100), ")".repeat(4_100)),
        format!("{}1{}", "(".repeat(43_000), ")".repeat(43_000)),
        lists(10_000),
        records(10_000),
    ];
    for expr in sizes {
        let dir = temp();
        write(dir.path(), "deep.reel", &flow(&expr));
        let check = reel_in(dir.path(), &["check", "--format", "json", "deep.reel"]);
        assert_eq!(check.status, 1, "{}", check.stderr);
        let diagnostics: Vec<Value> = serde_json::from_str(&check.stdout).unwrap();
        let codes: Vec<&str> = diagnostics
            .iter()
            .filter_map(|d| d["code"].as_str())
            .collect();
        assert_eq!(codes, ["syntax.too-deep"], "{}", check.stdout);
    }
}

#[test]
fn a_spec_of_nested_literals_grows_with_their_depth_not_its_square() {
    let dir = temp();
    let text = format!(
        "flow deep {{\n  step l = {}\n  step r = {}\n  output [l, r]\n}}\n",
        lists(MAX - 1),
        records(MAX - 1)
    );
    write(dir.path(), "deep.reel", &text);
    let build = reel_in(dir.path(), &["build", "deep.reel"]);
    assert_eq!(build.status, 0, "{}", build.stderr);
    assert!(build.stdout.contains("\"version\": 2,"));
    // Each level's type was written at every level above it: 16,000 `type` members here.
    let types = build.stdout.matches("\"type\"").count();
    assert!(types < 4 * MAX * 2, "{types} types");
}

#[test]
fn a_value_built_deeper_than_128_levels_is_stored_and_read_back() {
    // Each step wraps the one before: no expression is deep, the value is 150 levels.
    let mut source = String::from("flow wrapped {\n  step w0 = echo { value: 1 }\n");
    for i in 1..150 {
        source.push_str(&format!("  step w{i} = {{ x: w{} }}\n", i - 1));
    }
    source.push_str("  step last = echo { value: w149 }\n  output last\n}\n");
    let dir = temp();
    write(dir.path(), "wrapped.reel", &source);
    let home = dir.path().join(".reel");
    let home = home.to_str().unwrap();
    let r = reel_env(
        dir.path(),
        &["run", "wrapped.reel", "--json"],
        &[("REEL_HOME", home)],
    );
    assert_eq!(r.status, 0, "{r:?}");
    let ran = deep_json(&r.stdout);
    assert_eq!(ran["status"], "succeeded", "{ran}");
    let mut depth = 0;
    let mut v = &ran["output"];
    while let Some(inner) = v.get("x") {
        depth += 1;
        v = inner;
    }
    assert_eq!((depth, v), (149, &json!(1)));
    // The output is read back from the store (resume of a succeeded run prints it), and the
    // journal shows every value in place.
    let id = ran["run"].as_str().unwrap().to_string();
    let again = reel_env(
        dir.path(),
        &["resume", &id, "--json"],
        &[("REEL_HOME", home)],
    );
    assert_eq!(again.status, 0, "{again:?}");
    assert_eq!(deep_json(&again.stdout)["output"], ran["output"]);
    let events = reel_env(
        dir.path(),
        &["events", &id, "--full"],
        &[("REEL_HOME", home)],
    );
    assert_eq!(events.status, 0, "{events:?}");
}

/// Standard output as JSON however deep (serde_json's own reader stops at 128 levels).
fn deep_json(text: &str) -> Value {
    use serde::Deserialize;
    let mut de = serde_json::Deserializer::from_str(text);
    de.disable_recursion_limit();
    Value::deserialize(&mut de).expect("stdout is JSON")
}
