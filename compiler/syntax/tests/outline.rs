//! The outlined parse (outline, chunks, groups of chunks, whole items) gives exactly what the
//! whole-file parse gives: the same items and the same diagnostics, for valid files and for
//! every kind of breakage an edit can leave behind.

mod flowgen;

use proptest::prelude::*;
use proptest::sample::Index;
use reel_syntax::outline::{OutlineMemo, outline, parse_outlined};
use reel_syntax::parse;
use std::sync::Arc;

/// Checks that the outlined parse of `src` equals the whole parse.
fn same(src: &str) {
    let whole = parse(src);
    let (items, diags) = parse_outlined(src);
    assert_eq!(whole.diagnostics, diags, "diagnostics differ for:\n{src}");
    assert_eq!(whole.file.items, items, "items differ for:\n{src}");
}

/// Snippets an editor leaves half-typed, and the lines they break.
const SNIPPETS: [&str; 30] = [
    "\"",
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    "${",
    "+",
    ",",
    "\n",
    "///",
    "// x",
    "/// doc\n",
    ":",
    "=",
    "step",
    "step z = ",
    "input",
    "output ",
    "\nflow g {\n",
    "\ntool t {\n",
    "x.",
    ".in",
    "\\",
    " ",
    "1.5s",
    "?",
    "\n}\n",
    "then",
];

fn with_edit(src: &str, at: Index, del: usize, snippet: &str) -> String {
    let mut at = at.index(src.len() + 1);
    while !src.is_char_boundary(at) {
        at -= 1;
    }
    let mut end = (at + del).min(src.len());
    while !src.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{}{}", &src[..at], snippet, &src[end..])
}

#[test]
fn entries_past_the_nesting_limit_are_cut_alike() {
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    let sum = format!("1{}", " + 1".repeat(300));
    for body in [
        format!("  step a = {deep}\n  step b = 2\n"),
        format!("  step a = 1 +\n    {sum}\n  step b = a\n"),
        format!(
            "  input x: {}int{}\n  output {{ v: {sum} }}\n",
            "list<".repeat(200),
            ">".repeat(200)
        ),
        format!("  step a = echo {{\n    value: {deep}\n  }}\n  step b = a\n"),
    ] {
        let src = format!("flow f {{\n{body}}}\n\nflow g {{\n  step c = 1\n}}\n");
        same(&src);
        let codes: Vec<&str> = parse(&src)
            .diagnostics
            .iter()
            .map(|d| d.code.as_str())
            .collect();
        assert!(codes.iter().all(|c| *c == "syntax.too-deep"), "{codes:?}");
        assert!(!codes.is_empty());
    }
}

#[test]
fn fixed_cases() {
    let cases = [
        "",
        "flow a {\n}\n",
        "flow a {\n  step x = 1\n  step y = x + 1\n  output y\n}\n",
        "/// the flow\nflow a {\n  /// one\n  /// two\n  step x = 1 /// three\n  step y = 2\n}\n",
        "flow a { /// doc\n  step x = 1\n}\n",
        "flow a {\n  step x = 1 +\n  step y = 2\n}\n",
        "flow a {\n  step x = 1,\n  step y = 2\n}\n",
        "flow a {\n  input a\n  step y = 2\n}\n",
        "flow a {\n  input a\n}\n",
        "flow a {\n  step x = f(1\n  step y = 2\n}\n",
        "flow a {\n  step x = \"abc\n  step y = 2\n}\n",
        "flow a {\n  step x = {\n    a: 1\n  }\n  // plain\n\n  /// doc y\n  step y = x.a\n}\n",
        "flow a {\n  junk here\n  step y = 2\n  more junk\n}\n",
        "flow a {\n  step x = 1 }\n",
        "flow a {\n  step x = 1\n}\nflow b {\n  step x = 2\n",
        "tool t {\n  kind: \"pure\"\n}\n/// b\nflow b {\n  step x = t { }\n}\n",
        "flow a {\n  step x = if true\n    then 1\n    else 2\n}\n",
        "flow a {\n  step x = y\n    .z\n  step w = 1\n}\n",
        "flow a {\n  step x = 1\n  flow b {\n  step y = 2\n}\n",
        "flow a {\n  step x = \"${ 1 }\"\n  step y = \"${\"\n}\n",
        "x\nflow a {\n}\n",
        "flow a {\n  step x = 1\n} step\n",
        "flow a {\n  step s = 1\nstep\n\\\n  step t = 2\n}\n",
        "flow a {\n  \\\n  step x = 1\n}\n",
        // A member line closes the blocks left open; the `}` meant for one closes the flow.
        "flow a {\n  step x = f {\n    v: 1\n  step y = 2\n  }, z\n}\n",
        // A `key:` line closes a `${` left open; the `}` after it closes the block.
        "flow a {\n  step x = f {\n    v: \"${a\n    w: 1 }\"\n  }\n  step y = 2\n}\n",
        "flow a {\n  step x = f {\n    v: g(a\n    w: 1 }\n  step y = 2\n}\n",
        // A line of junk that leaves `{(` open before a member line (found by proptest).
        "flow a {\n  step s = 1\n  {(.\n  step t = 2\n}\n",
        "flow a {\n  step s = 1\n  \"\"{(.\u{0}\n  step t = 2\n}\n",
        "flow a {\n  step s = 1\n  {( x?. // note\n  step t = 2\n}\n",
        "flow a {\n  step s = 1\nstep\n\"\ninput \n{\n  step t = 2\n}\n",
        // `{[.` left open, then a line of junk before the member line (found by proptest).
        "flow a {\n  step s = 1\n  {[.\n|\n  step t = 2\n}\n",
        // A `)` that closes a `{` opened after its `(`, on another line: the parser's recovery
        // ends the flow at the end of the file, not at its last `}` (found by proptest in CI).
        "flow f {\n  step s = echo {\n    a: ( x\n    b: { c: ){ d: 1 }\n  } }\n",
        "flow f {\n  step s = echo {\n    a: ( x\n    b: { c: ){ d: 1 }\n  } }\nflow g {\n  step t = 2\n}\n",
        // A `key:`-like word first on a line inside a `${`, after a word that is not a keyword
        // or after a character the lexer skips (a panic once, on the `→`).
        "flow a {\n  step s = \"${[for x in y if z else w\n  k: 1]}\"\n}\n",
        "flow a {\n  step s = \"${[for x in y if z else →\n  k: 1]}\"\n}\n",
    ];
    for c in cases {
        same(c);
    }
}

/// A valid file with a `key:`-like word first on a line inside a `${`, after a token an
/// expression continues past: the lexer closes nothing there, and the scan does not give up
/// (found by proptest: it parsed such a file whole).
#[test]
fn a_word_and_colon_after_else_inside_an_interpolation_is_not_an_entry() {
    let src = "// generated\n\nflow f0 { step s0 = echo { foreach: \"${[for x in 0 if if 0 then 0 else\ntrue: 0]}\" }, input in1: string, input in2: string, input in3: string, input in4: string }\n";
    assert!(!outline(src).whole, "parsed whole:\n{src}");
    same(src);
}

#[test]
fn generated_files_split_into_member_chunks() {
    let src = "flow a {\n  input n: int = 1\n  step x = n\n  /// y\n  step y = x\n  output y\n}\n";
    let o = outline(src);
    assert!(!o.whole);
    assert_eq!(o.items[0].body.as_ref().map(Vec::len), Some(4));
}

/// Edits at the start of a member line of a split body are scanned alone: the property test
/// above covers the reusing path, not just the fallback.
#[test]
fn edits_of_a_split_body_rescan_only_their_lines() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut edits, mut reused) = (0, 0);
    while edits < 400 {
        let src = flowgen::file()
            .new_tree(&mut runner)
            .expect("a file")
            .current();
        let memo = OutlineMemo::scan(Arc::from(src.as_str()));
        // The line of a member in the middle of the first body the scan split.
        let Some(chunks) = memo.outline().items.iter().find_map(|i| i.body.as_ref()) else {
            continue;
        };
        let Some(chunk) = chunks.get(chunks.len() / 2) else {
            continue;
        };
        let at = src[..chunk.start as usize].rfind('\n').map_or(0, |n| n + 1);
        for snippet in ["x", "1", " ", "// note\n"] {
            let edited = format!("{}{}{}", &src[..at], snippet, &src[at..]);
            let next = memo.update(Arc::from(edited.as_str()));
            assert_eq!(next.outline(), &outline(&edited));
            edits += 1;
            if let Some(span) = next.rescanned() {
                reused += 1;
                let edit = (at + snippet.len()) as u32;
                assert!(
                    span.start as usize <= at && edit <= span.end,
                    "{span:?}:\n{edited}"
                );
            }
        }
    }
    assert!(
        reused * 10 >= edits * 9,
        "{reused} of {edits} edits reused the scan"
    );
}

#[test]
fn the_reference_examples() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/reference");
    for entry in std::fs::read_dir(&dir).expect("the reference examples are in the repository") {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_some_and(|e| e == "reel") {
            let src = std::fs::read_to_string(&path).expect("an example");
            same(&src);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn generated_files(src in flowgen::file()) {
        // A valid file never needs the whole-file fallback.
        prop_assert!(!outline(&src).whole, "parsed whole:\n{}", src);
        same(&src);
    }

    #[test]
    fn generated_files_after_an_edit(
        src in flowgen::file(),
        at in any::<Index>(),
        del in 0usize..4,
        snippet in proptest::sample::select(SNIPPETS.to_vec()),
    ) {
        same(&with_edit(&src, at, del, snippet));
    }

    #[test]
    fn generated_files_after_two_edits(
        src in flowgen::file(),
        at in [any::<Index>(), any::<Index>()],
        del in 0usize..20,
        snippets in [proptest::sample::select(SNIPPETS.to_vec()), proptest::sample::select(SNIPPETS.to_vec())],
    ) {
        let once = with_edit(&src, at[0], del, snippets[0]);
        same(&with_edit(&once, at[1], 0, snippets[1]));
    }

    #[test]
    fn an_outline_kept_across_edits_is_the_full_scan(
        src in flowgen::file(),
        edits in proptest::collection::vec(
            (any::<Index>(), 0usize..6, proptest::sample::select(SNIPPETS.to_vec())),
            1..8,
        ),
    ) {
        let mut memo = OutlineMemo::scan(Arc::from(src.as_str()));
        let mut text = src;
        for (at, del, snippet) in edits {
            text = with_edit(&text, at, del, snippet);
            memo = memo.update(Arc::from(text.as_str()));
            prop_assert_eq!(memo.outline(), &outline(&text), "after edits to:\n{}", text);
        }
    }

    #[test]
    fn an_outline_kept_across_token_soup_edits_is_the_full_scan(
        lines in proptest::collection::vec(
            "([a-z_]{1,6}|[0-9]{1,3}|[{}\\[\\]()\",:.=+$\\\\]| |//[a-z ]*|///[a-z ]*|step|flow|input)+",
            1..8,
        ),
        places in proptest::collection::vec(any::<Index>(), 8),
    ) {
        // A clean flow of many steps, then lines of soup put between its lines one by one.
        let mut text = String::from("flow a {\n");
        for i in 0..24 {
            text.push_str(&format!("  step s{i} = {{\n    v: {i}\n  }}\n"));
        }
        text.push_str("}\n\nflow b {\n  step t = 1\n}\n");
        let mut memo = OutlineMemo::scan(Arc::from(text.as_str()));
        for (line, at) in lines.iter().zip(&places) {
            let starts: Vec<usize> = std::iter::once(0)
                .chain(text.match_indices('\n').map(|(i, _)| i + 1))
                .filter(|&i| i < text.len())
                .collect();
            let at = starts[at.index(starts.len())];
            text.insert_str(at, &format!("{line}\n"));
            memo = memo.update(Arc::from(text.as_str()));
            prop_assert_eq!(memo.outline(), &outline(&text), "after edits to:\n{}", text);
        }
    }

    #[test]
    fn random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        same(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn random_bytes_in_a_flow(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let body = String::from_utf8_lossy(&bytes);
        same(&format!("flow a {{\n  step s = 1\n  {body}\n  step t = 2\n}}\n"));
    }

    #[test]
    fn token_soup_in_a_flow(
        body in "([a-z_]{1,6}|[0-9]{1,3}(ms|s|\\.5)?|[{}\\[\\]()\",:.?=!<>+*/%&|$\\\\]| |\n|//[a-z ]*\n|///[a-z ]*\n|flow|step|tool|input|output|if|then|else|for|in){0,80}"
    ) {
        same(&format!("flow a {{\n  step s = 1\n{body}\n  step t = 2\n}}\n"));
    }
}

/// A flow of `n` steps with `broken` as the member line in the middle.
fn big_flow(n: usize, broken: &str) -> String {
    flow_of(n, broken, false)
}

/// A flow of `n` steps with `broken` as the member line in the middle; with `docs`, a doc
/// comment above each step (and a plain comment above some), as generated flows have.
fn flow_of(n: usize, broken: &str, docs: bool) -> String {
    let mut src = String::from("flow big {\n  input n: int = 1\n");
    for i in 0..n {
        if i == n / 2 {
            src.push_str(broken);
            src.push('\n');
        }
        if docs {
            if i % 3 == 0 {
                src.push_str("  // plain\n");
            }
            src.push_str(&format!("  /// Step {i}.\n  ///\n  /// More about it.\n"));
        }
        src.push_str(&format!("  step step_{i} = len(\"value {i}\") + input.n\n"));
        if i % 7 == 0 {
            src.push('\n');
        }
    }
    src.push_str("  output step_0\n}\n");
    src
}

/// Each diagnostic as `code line:col message`, its labels under it.
fn shown(src: &str, diags: &[reel_syntax::Diagnostic]) -> String {
    let at = |offset: u32| {
        let before = &src[..offset as usize];
        let line = before.matches('\n').count() + 1;
        let col = before.len() - before.rfind('\n').map_or(0, |n| n + 1) + 1;
        format!("{line}:{col}")
    };
    let mut out = String::new();
    for d in diags {
        out.push_str(&format!(
            "{} {} {} ({})\n",
            d.code.as_str(),
            at(d.primary.span.start),
            d.message,
            d.primary.message
        ));
        for l in &d.secondary {
            out.push_str(&format!("  {} {}\n", at(l.span.start), l.message));
        }
    }
    out
}

/// Half-typed steps that leave delimiters open.
const HALF_TYPED: [&str; 6] = [
    "  step typed = len(",
    "  step typed = len(\"abc",
    "  step typed = [1, 2",
    "  step typed = echo { value: 1",
    "  step typed = \"abc ${input.n",
    "  step typed = f([{ a: (1",
];

/// A delimiter left open in the middle of a big flow (as a half-typed step leaves it) is closed
/// before the next member line, and reported there, the same whether the file is parsed whole or
/// group by group; the flow is still split into groups, not parsed whole.
#[test]
fn a_delimiter_left_open_mid_flow_is_split_and_reported_as_in_the_file() {
    let mut all = String::new();
    for broken in HALF_TYPED {
        let src = big_flow(300, broken);
        same(&src);
        let o = outline(&src);
        assert!(!o.whole, "{broken}");
        let chunks = o.items[0].body.as_ref().expect("the body is split");
        assert!(chunks.iter().any(|c| c.tail.is_some()), "{broken}");
        let (_, diags) = parse_outlined(&src);
        all.push_str(&format!("{broken}\n{}\n", shown(&src, &diags)));
    }
    insta::assert_snapshot!(all);
}

/// The same before a member with doc comments above it: the delimiter is closed at the member's
/// line, past its doc comments, which stay the member's; the flow is still split.
#[test]
fn a_delimiter_left_open_before_a_documented_member_is_split_as_in_the_file() {
    for broken in HALF_TYPED {
        for blank in ["", "\n", "\n  // between\n\n"] {
            let src = flow_of(300, &format!("{broken}{blank}"), true);
            same(&src);
            let o = outline(&src);
            assert!(!o.whole, "{broken:?} {blank:?}");
            let chunks = o.items[0].body.as_ref().expect("the body is split");
            assert!(
                chunks.iter().any(|c| c.tail.is_some()),
                "{broken:?} {blank:?}"
            );
            let mut memo = OutlineMemo::scan(Arc::from(flow_of(300, "  step typed = 1", true)));
            memo = memo.update(Arc::from(src.as_str()));
            assert_eq!(memo.outline(), &o, "{broken:?} {blank:?}");
        }
    }
}

/// Typing a step key by key in the middle of a big flow, through the keys that leave `(` and `"`
/// open, parses again only the group the key is in: every other group's text, and so its parse,
/// is the one kept from the key before; with doc comments above the steps or without.
#[test]
fn a_key_typed_inside_an_open_delimiter_reparses_only_its_group() {
    for docs in [false, true] {
        typed_inside_an_open_delimiter(docs);
    }
}

fn typed_inside_an_open_delimiter(docs: bool) {
    use reel_syntax::outline::lay_out_flow;
    use std::collections::HashMap;
    let typed = "  step typed = len(\"abcdef\") + 1";
    let before = flow_of(1000, "  step first = 1", docs);
    let at = before.find("  step first = 1").unwrap() + "  step first = 1\n".len();
    let mut kept: HashMap<(String, reel_syntax::ChunkEnd), ()> = HashMap::new();
    let parses = |src: &str, kept: &mut HashMap<_, ()>| {
        let o = outline(src);
        assert!(!o.whole);
        let chunks = o.items[0].body.as_ref().expect("the body is split");
        let mut fresh = 0;
        let groups = lay_out_flow(src, chunks, |text, end| {
            if kept.insert((text.to_string(), end), ()).is_none() {
                fresh += 1;
            }
            Box::new(reel_syntax::parse_group(text, end))
        })
        .expect("the flow is laid out in groups");
        assert!(groups.len() > 50, "{} groups", groups.len());
        fresh
    };
    parses(&before, &mut kept);
    let mut open_keys = 0;
    for i in 1..=typed.len() {
        let text = format!("{}{}\n{}", &before[..at], &typed[..i], &before[at..]);
        let fresh = parses(&text, &mut kept);
        // A new line splits no group in two more than once: at most the group the typed line
        // joins, and the one its head may end.
        assert!(fresh <= 2, "{:?} parsed {fresh} groups", &typed[..i]);
        if typed[..i].contains('(') && !typed[..i].contains(')') {
            open_keys += 1;
            assert_eq!(fresh, 1, "{:?} parsed {fresh} groups", &typed[..i]);
        }
    }
    assert!(open_keys >= 9, "{open_keys}");
}
