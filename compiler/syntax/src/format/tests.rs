//! Formatter unit tests: escapes, keys, comment placement, blank lines and doc comments.

use super::*;

fn fmt(src: &str) -> String {
    match format(src) {
        Ok(out) => out,
        Err(e) => panic!("{src}: {:#?}", e.diagnostics),
    }
}

/// Formats `src` and checks the result is a fixed point.
fn fixed(src: &str) -> String {
    let once = fmt(src);
    assert_eq!(fmt(&once), once, "not idempotent for:\n{src}");
    once
}

#[test]
fn strings_are_escaped_canonically() {
    assert_eq!(
        fixed("flow f {\n step s = \"a\\\"b\\\\c\\nd\\te $ \\$x \\${y} $${z}\"\n}"),
        "flow f {\n  step s = \"a\\\"b\\\\c\\nd\\te $ $x \\${y} $${z}\"\n}\n"
    );
}

#[test]
fn keys_lose_quotes_only_when_they_are_words() {
    assert_eq!(
        fixed("flow f {\n step s = { \"a\": 1, \"if\": 2, \"b-c\": 3, \"\": 4, \"é_1\": 5 }\n}"),
        "flow f {\n  step s = { a: 1, if: 2, \"b-c\": 3, \"\": 4, é_1: 5 }\n}\n"
    );
}

#[test]
fn comments_keep_their_marker_and_text() {
    let c = |text: &str, doc| Comment {
        span: Span::default(),
        text: text.to_string(),
        doc,
    };
    assert_eq!(comment_text(&c("", false)), "//");
    assert_eq!(comment_text(&c("", true)), "///");
    assert_eq!(comment_text(&c("x", false)), "// x");
    assert_eq!(comment_text(&c("/x", false)), "// /x");
    assert_eq!(comment_text(&c("// x", false)), "//// x");
    assert_eq!(comment_text(&c("/x", true)), "/// /x");
}

#[test]
fn blank_lines_between_members_are_kept_once_and_added_between_declarations() {
    let src =
        "flow a {\n\n\n  input x: int\n  input y: int\n\n\n\n  step s = x\n\n}\ntool t {\n}\n";
    assert_eq!(
        fixed(src),
        "flow a {\n  input x: int\n  input y: int\n\n  step s = x\n}\n\ntool t {}\n"
    );
}

#[test]
fn step_blocks_are_always_broken_and_empty_blocks_are_braces() {
    assert_eq!(
        fixed("flow f { step a = echo { value: 1, when: true }, step b = t {\n} }"),
        "flow f {\n  step a = echo {\n    value: 1\n    when: true\n  }\n  step b = t {}\n}\n"
    );
}

#[test]
fn records_and_lists_written_on_several_lines_stay_broken() {
    let src = "flow f {\n step s = [1,\n 2]\n step r = {a: 1,\n b: [3, 4]}\n}";
    assert_eq!(
        fixed(src),
        "flow f {\n  step s = [\n    1,\n    2,\n  ]\n  step r = {\n    a: 1\n    b: [3, 4]\n  }\n}\n"
    );
}

#[test]
fn records_and_lists_too_wide_for_the_line_are_broken() {
    let long = "x".repeat(44);
    let src = format!("flow f {{\n step s = [\"{long}\", \"{long}\"]\n}}");
    assert_eq!(
        fixed(&src),
        format!("flow f {{\n  step s = [\n    \"{long}\",\n    \"{long}\",\n  ]\n}}\n")
    );
}

#[test]
fn schemas_are_inline_when_they_fit_however_they_were_written() {
    let src =
        "tool t {\n input {\n  text: string\n  n: int?\n }\n output { a: list<{ b: int }> }\n}";
    assert_eq!(
        fixed(src),
        "tool t {\n  input { text: string, n: int? }\n  output { a: list<{ b: int }> }\n}\n"
    );
}

#[test]
fn trailing_and_own_line_comments_stay_where_they_are() {
    let src = "flow f { // header\n  // lead\n  input x: int // trail\n  // end\n}\n// after\n";
    assert_eq!(
        fixed(src),
        "flow f { // header\n  // lead\n  input x: int // trail\n  // end\n}\n\n// after\n"
    );
}

#[test]
fn comments_inside_an_unbreakable_expression_move_above_its_entry() {
    let src = "flow f {\n  /// Doc.\n  step s = a + // one\n    b * // two\n    c // three\n}\n";
    assert_eq!(
        fixed(src),
        "flow f {\n  // one\n  // two\n  /// Doc.\n  step s = a + b * c // three\n}\n"
    );
}

#[test]
fn a_call_with_comments_among_its_arguments_is_broken() {
    let src = "flow f {\n  step s = join(lines, // the lines\n  \"\\n\")\n}\n";
    assert_eq!(
        fixed(src),
        "flow f {\n  step s = join(\n    lines, // the lines\n    \"\\n\",\n  )\n}\n"
    );
}

#[test]
fn a_doc_comment_never_becomes_the_doc_of_another_node() {
    // `/// a` documents nothing (an empty line follows it); moving `// b` above the step must
    // not glue `/// a` to the step.
    let src = "flow f { /// a\n\n  step s = x + // b\n  y\n}\n";
    let out = fixed(src);
    assert_eq!(out, "flow f { /// a\n  // b\n  step s = x + y\n}\n");
    let hoisted = "flow f {\n  step s = x + /// b\n  y\n}\n";
    let out = fixed(hoisted);
    assert_eq!(out, "flow f {\n  /// b\n\n  step s = x + y\n}\n");
    let Item::Flow(flow) = &parse(&out).file.items[0] else {
        panic!("a flow")
    };
    let Member::Step(step) = &flow.members[0] else {
        panic!("a step")
    };
    assert_eq!(step.doc, None);
}

#[test]
fn a_trailing_doc_comment_that_documents_the_next_step_moves_above_it() {
    let src = "flow f {\n  step a = 1 /// b's doc\n  step b = 2\n}\n";
    assert_eq!(
        fixed(src),
        "flow f {\n  step a = 1\n  /// b's doc\n  step b = 2\n}\n"
    );
}

#[test]
fn doubled_optional_marks_stay_two_tokens() {
    assert_eq!(
        fixed("flow f {\n input x: int? ?\n}"),
        "flow f {\n  input x: int? ?\n}\n"
    );
}

#[test]
fn parentheses_are_kept_and_operators_spaced() {
    assert_eq!(
        fixed("flow f {\n step s = (a+b)*-c??d?.e[0]\n}"),
        "flow f {\n  step s = (a + b) * -c ?? d?.e[0]\n}\n"
    );
}

#[test]
fn a_file_with_syntax_errors_is_not_formatted() {
    let err = format("flow f {\n  step = 1\n").expect_err("syntax errors");
    assert!(!err.diagnostics.is_empty());
    assert!(err.to_string().contains("syntax error"));
}

#[test]
fn empty_and_comment_only_files() {
    assert_eq!(fixed(""), "");
    assert_eq!(fixed("\n\n  \n"), "");
    assert_eq!(fixed("// a\n\n\n// b\n"), "// a\n\n// b\n");
}

#[test]
fn an_entry_ending_in_a_joining_keyword_keeps_a_comma() {
    assert_eq!(
        fixed("tool t {\n input { a: in, b: int\n c: x }\n}"),
        "tool t {\n  input { a: in, b: int, c: x }\n}\n"
    );
    assert_eq!(
        fixed("flow f { input a: in, input b: int }"),
        "flow f {\n  input a: in,\n  input b: int\n}\n"
    );
    assert_eq!(
        fixed("flow f { step a = x.in, step b = y?.if }"),
        "flow f {\n  step a = x.in\n  step b = y?.if\n}\n"
    );
}

#[test]
fn windows_line_endings_become_line_feeds() {
    assert_eq!(
        fixed("// c\r\nflow f {\r\n  input a: int // t\r\n\r\n\r\n  env HOME\r\n}\r\n"),
        "// c\nflow f {\n  input a: int // t\n\n  env HOME\n}\n"
    );
}

#[test]
fn a_doc_comment_trailing_one_declaration_documents_the_next() {
    assert_eq!(
        fixed("flow a {} /// Doc of b.\nflow b {}"),
        "flow a {}\n\n/// Doc of b.\nflow b {}\n"
    );
}

#[test]
fn nested_blocks_indent_by_two_spaces_each() {
    let src = "flow f {\n step s = echo {\n value: { a: [1,\n {b: 2}], c: f( // why\n x) }\n }\n}";
    assert_eq!(
        fixed(src),
        "flow f {
  step s = echo {
    value: {
      a: [
        1,
        { b: 2 },
      ]
      c: f( // why
        x,
      )
    }
  }
}
"
    );
}
