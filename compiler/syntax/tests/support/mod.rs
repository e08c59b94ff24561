//! The formatter's promises, checked on one input: its output parses, means the same as the
//! input, keeps every comment and is a fixed point.

use reel_syntax::ast::File;
use reel_syntax::format::format;
use reel_syntax::parse;

/// Formats `src`, which must parse cleanly, asserts every promise of the formatter and returns the output.
pub fn check_format(src: &str) -> String {
    let before = parse(src);
    assert!(
        before.diagnostics.is_empty(),
        "the input does not parse:\n{src}\n{:#?}",
        before.diagnostics
    );
    let out = match format(src) {
        Ok(out) => out,
        Err(e) => panic!("format failed on a clean file:\n{src}\n{e}"),
    };
    let after = parse(&out);
    assert!(
        after.diagnostics.is_empty(),
        "the output does not parse:\n--- input\n{src}\n--- output\n{out}\n{:#?}",
        after.diagnostics
    );
    assert_eq!(
        shape(&after.file),
        shape(&before.file),
        "the meaning changed:\n--- input\n{src}\n--- output\n{out}"
    );
    assert_eq!(
        comments(&after.file),
        comments(&before.file),
        "the comments changed:\n--- input\n{src}\n--- output\n{out}"
    );
    let again = format(&out).unwrap_or_else(|e| panic!("the output does not format: {e}"));
    assert_eq!(
        again, out,
        "not a fixed point:\n--- input\n{src}\n--- once\n{out}"
    );
    out
}

/// The items printed with every span and key-quoting flag removed: the two things formatting
/// may change without changing meaning.
fn shape(file: &File) -> String {
    let debug = format!("{:?}", file.items);
    let mut out = String::with_capacity(debug.len());
    let mut rest = debug.as_str();
    while let Some(i) = rest.find("Span { start: ") {
        out.push_str(&rest[..i]);
        out.push_str("Span");
        let span = &rest[i..];
        let end = span.find(" }").map_or(span.len(), |n| n + 2);
        rest = &span[end..];
    }
    out.push_str(rest);
    out.replace("quoted: true, ", "")
        .replace("quoted: false, ", "")
}

/// The comments as a multiset: whether each is a doc comment, and its text.
fn comments(file: &File) -> Vec<(bool, String)> {
    let mut all: Vec<(bool, String)> = file
        .comments
        .iter()
        .map(|c| (c.doc, c.text.clone()))
        .collect();
    all.sort();
    all
}
