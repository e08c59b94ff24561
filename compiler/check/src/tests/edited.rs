//! An edited database answers as a fresh one: after any chain of edits, the diagnostics and
//! every flow's FlowSpec are those a new database gives for the final text. This is what lets
//! the language server and a long `reel check --watch`-style session keep one database.

use std::sync::Arc;

use proptest::prelude::*;
use proptest::sample::Index;
use salsa::Setter;

use super::db_with;
use super::examples::reference_examples;
use crate::{build_flow, file_diagnostics, flow_names};

/// A flow of every kind of member, with steps reading one another across parse groups.
fn long_flow() -> String {
    let mut src = String::from(
        "/// The flow.\nflow f {\n  input n: int = 1\n  input tag: string = \"t\"\n  env HOME\n\n",
    );
    for i in 0..40 {
        let body = match i % 5 {
            0 if i == 0 => "echo { value: { x: input.n, tag: input.tag } }".to_string(),
            0 => format!("echo {{ value: {{ x: input.n + {i}, prev: s{} }} }}", i - 1),
            1 => format!("s{}.x * 2", i - 1),
            2 => format!(
                "echo {{\n    value: \"${{s{}}} ${{env.HOME}}\"\n  }}",
                i - 1
            ),
            3 => format!(
                "echo {{\n    when: s{} > 0\n    value: [s{}, s{}]\n  }}",
                i - 2,
                i - 2,
                i - 3
            ),
            _ => format!("len(s{} ?? []) + s{}", i - 1, i - 3),
        };
        if i % 7 == 0 {
            src.push_str(&format!("  /// step {i}\n"));
        }
        src.push_str(&format!("  step s{i} = {body}\n"));
        if i % 9 == 0 {
            src.push_str("\n  // a comment between steps\n\n");
        }
    }
    src.push_str("  output { last: s39, first: s0.x }\n}\n");
    src
}

/// What an editor leaves behind: half-typed code, references, type changes, new members.
const SNIPPETS: [&str; 34] = [
    "\"",
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    "${",
    "\n",
    " ",
    ",",
    ".",
    "=",
    ":",
    "+ 1",
    "s3",
    "s12.x",
    "input.n",
    "input.tag",
    "env.HOME",
    "secret.TOKEN",
    "to_string(",
    "true",
    "1.5",
    "\"text\"",
    "{ a: 1 }",
    "// note\n",
    "/// doc\n",
    "\n  step q = s5\n",
    "\n  step s4 = 1\n",
    "\n  input m: int\n",
    "after: [s2]\n",
    "\nflow g {\n  step a = 1\n}\n",
    "\ntool t {\n}\n",
];

fn edit(text: &str, at: Index, del: usize, snippet: &str) -> String {
    let mut at = at.index(text.len() + 1);
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let mut end = (at + del).min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{}{}", &text[..at], snippet, &text[end..])
}

/// Applies the edits one by one to one database, comparing it with a fresh one after each.
fn follows_edits(start: &str, edits: &[(Index, usize, &str)]) -> Result<(), TestCaseError> {
    let (mut db, file) = db_with("edited.reel", start);
    file_diagnostics(&db, file);
    let mut text = start.to_string();
    for &(at, del, snippet) in edits {
        text = edit(&text, at, del, snippet);
        file.set_text(&mut db).to(Arc::from(text.as_str()));
        let (fresh, fresh_file) = db_with("edited.reel", &text);
        prop_assert_eq!(
            file_diagnostics(&db, file),
            file_diagnostics(&fresh, fresh_file),
            "diagnostics after edits, of:\n{}",
            text
        );
        let flows = flow_names(&db, file);
        prop_assert_eq!(&flows, &flow_names(&fresh, fresh_file));
        for flow in flows {
            prop_assert_eq!(
                build_flow(&db, file, &flow),
                build_flow(&fresh, fresh_file, &flow),
                "the FlowSpec of {} after edits, of:\n{}",
                flow,
                text
            );
        }
    }
    Ok(())
}

fn edits() -> impl Strategy<Value = Vec<(Index, usize, &'static str)>> {
    proptest::collection::vec(
        (
            any::<Index>(),
            0usize..12,
            proptest::sample::select(SNIPPETS.to_vec()),
        ),
        1..6,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn a_long_flow_after_edits_checks_as_a_fresh_one(edits in edits()) {
        follows_edits(&long_flow(), &edits)?;
    }

    #[test]
    fn the_reference_examples_after_edits_check_as_fresh_ones(
        which in any::<Index>(),
        edits in edits(),
    ) {
        let examples = reference_examples();
        let (_, text) = &examples[which.index(examples.len())];
        follows_edits(text, &edits)?;
    }
}

#[test]
fn the_long_flow_is_clean() {
    let (db, file) = db_with("edited.reel", &long_flow());
    assert_eq!(file_diagnostics(&db, file), &[][..]);
}
