//! Completion by position: a table of flow texts with the cursor at `$0` and the labels
//! proposed there. The builtin functions and the built-in tools are many and the same
//! everywhere, so a case shows them as `+builtins` and `+tools` (all of them, or the case
//! fails); every other label is listed in the order it is proposed.

use reel_compiler::contracts::builtin_contracts;
use reel_compiler::{RootDb, SourceFile};

use super::*;

/// A file with a user tool and a flow declaring a bit of everything, `lines` added at the end
/// of the flow's body.
fn flow(lines: &str) -> String {
    format!(
        r#"tool shout {{
  kind: "pure"
  exec: ["shout"]
  input {{ text: string }}
  output {{ loud: string }}
}}

flow f {{
  input who: string
  input opts: {{ depth: int, tag: {{ name: string }} }}
  secret token
  env HOME
  step greeting = echo {{ value: {{ line: "hi", size: 2 }} }}
{lines}
}}
"#
    )
}

/// The labels at `$0`, rendered as the table shows them.
fn labels(src: &str) -> String {
    let offset = src.find("$0").expect("a cursor marker");
    let text = src.replace("$0", "");
    let db = RootDb::default();
    let file = SourceFile::new(&db, "t.reel".into(), "/tmp".into(), text.as_str().into());
    let cx = Ctx::new(&db, file);
    let items = complete(&cx, offset).items;
    let builtins: Vec<&str> = reel_eval::builtins().iter().map(|b| b.name).collect();
    let tools: Vec<String> = builtin_contracts().iter().map(|c| c.name.clone()).collect();
    let mut shown = Vec::new();
    let (mut b, mut t) = (0, 0);
    for i in &items {
        match i.kind {
            ItemKind::Function if builtins.contains(&i.label.as_str()) => b += 1,
            ItemKind::Tool if tools.contains(&i.label) => t += 1,
            _ => shown.push(i.label.clone()),
        }
    }
    assert!(
        b == 0 || b == builtins.len(),
        "{b} of the builtins: {items:?}"
    );
    assert!(t == 0 || t == tools.len(), "{t} of the tools: {items:?}");
    if b > 0 {
        shown.push("+builtins".into());
    }
    if t > 0 {
        shown.push("+tools".into());
    }
    shown.join(" ")
}

const EXPR: &str = "greeting input.who input.opts env.HOME if true false null +builtins";

#[test]
fn completion_by_position() {
    let cases: Vec<(&str, String, String)> = vec![
        // Expression positions.
        (
            "after `=`, a word typed",
            flow("  step probe = gre$0"),
            EXPR.replace("+builtins", "shout +builtins +tools"),
        ),
        (
            "after `=`, nothing typed",
            flow("  step probe = $0"),
            EXPR.replace("+builtins", "shout +builtins +tools"),
        ),
        (
            "after an operator: no tools, not the step itself",
            flow("  step probe = greeting.size + $0"),
            EXPR.into(),
        ),
        (
            "on the next line of an expression",
            flow("  step probe = greeting.size +\n    $0"),
            EXPR.into(),
        ),
        (
            "in a builtin's arguments",
            flow("  step probe = upper($0"),
            EXPR.into(),
        ),
        (
            "in an unclosed call before the next step",
            flow("  step probe = upper(gre$0\n  step after = 1"),
            format!("greeting after {}", &EXPR["greeting ".len()..]),
        ),
        (
            "in an interpolation",
            flow("  step probe = \"hi ${$0}\""),
            EXPR.into(),
        ),
        ("in the output", flow("  output $0"), EXPR.into()),
        (
            "an input's default: constants only",
            flow("  input n: int = $0"),
            "if true false null +builtins".into(),
        ),
        (
            "in a string: nothing",
            flow("  step probe = \"gre$0\""),
            String::new(),
        ),
        // Arguments of a step's block.
        (
            "a block's keys",
            flow("  step probe = echo {\n    $0\n  }"),
            "when foreach concurrency after retry timeout value".into(),
        ),
        (
            "a block's keys after a comma",
            flow("  step probe = echo { value: 1, $0 }"),
            "when foreach concurrency after retry timeout value".into(),
        ),
        (
            "an argument's value",
            flow("  step probe = echo { value: gre$0 }"),
            EXPR.into(),
        ),
        (
            "an argument of a foreach step: item and index",
            flow("  step probe = echo { foreach: [1, 2], value: it$0 }"),
            "greeting input.who input.opts env.HOME item index if true false null +builtins".into(),
        ),
        (
            "the foreach step's `when`: no item",
            flow("  step probe = echo { foreach: [1, 2], when: $0 }"),
            EXPR.into(),
        ),
        (
            "outside any foreach: no item",
            flow("  step probe = it$0"),
            EXPR.replace("+builtins", "shout +builtins +tools"),
        ),
        (
            "a `secret` parameter: only secrets",
            flow("  step probe = http.get { url: \"http://x\", bearer: $0 }"),
            "secret.token".into(),
        ),
        (
            "a `string` parameter: no secrets",
            flow("  step probe = http.get { url: $0 }"),
            EXPR.into(),
        ),
        (
            "inside a record in a `secret` parameter's place: no secrets",
            flow("  step probe = http.get { url: \"http://x\", bearer: { a: $0 } }"),
            EXPR.into(),
        ),
        // Members and declarations.
        (
            "an empty line of a flow",
            flow("\n  $0\n"),
            "input secret env step output".into(),
        ),
        (
            "a keyword being typed",
            flow("  st$0"),
            "input secret env step output".into(),
        ),
        (
            "the name of a new step: nothing",
            flow("  step pro$0"),
            String::new(),
        ),
        (
            "an input's type",
            flow("  input n: $0"),
            "string int float bool duration json secret list".into(),
        ),
        (
            "the top of the file",
            format!("{}\n$0", flow("")),
            "flow tool".into(),
        ),
        (
            "a tool's body",
            flow("").replacen("  exec: [\"shout\"]\n", "  exec: [\"shout\"]\n  $0\n", 1),
            "kind exec input output".into(),
        ),
        // After a dot.
        (
            "a step's record fields",
            flow("  output greeting.$0"),
            "line size".into(),
        ),
        (
            "after `?.`",
            flow("  output greeting?.$0"),
            "line size".into(),
        ),
        ("the inputs", flow("  output input.$0"), "who opts".into()),
        (
            "an input's record fields, two deep",
            flow("  output input.opts.tag.$0"),
            "name".into(),
        ),
        ("the environment", flow("  output env.$0"), "HOME".into()),
        (
            "a dotted tool name",
            flow("  step probe = http.$0"),
            "shout +tools".into(),
        ),
    ];
    let mut wrong = Vec::new();
    for (what, src, expected) in &cases {
        let got = labels(src);
        if got != *expected {
            wrong.push(format!(
                "{what}:\n  expected: {expected}\n  got:      {got}"
            ));
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

/// The step labels proposed at `$0` of `src`, and whether the list says it is incomplete.
fn steps_proposed(src: &str) -> (Vec<String>, bool) {
    let offset = src.find("$0").expect("a cursor marker");
    let text = src.replace("$0", "");
    let db = RootDb::default();
    let file = SourceFile::new(&db, "t.reel".into(), "/tmp".into(), text.as_str().into());
    let cx = Ctx::new(&db, file);
    let got = complete(&cx, offset);
    let steps = got
        .items
        .into_iter()
        .filter(|i| i.kind == ItemKind::Step)
        .map(|i| i.label)
        .collect();
    (steps, got.incomplete)
}

/// A flow of `n` steps `s0`, `s1`… and a step being written at its end.
fn many_steps(n: usize, typed: &str) -> String {
    let mut src = String::from("flow f {\n");
    for i in 0..n {
        src.push_str(&format!("  step s{i} = {i}\n"));
    }
    src.push_str(&format!("  step probe = {typed}$0\n  output probe\n}}\n"));
    src
}

#[test]
fn a_big_flows_steps_are_narrowed_to_the_word_typed_and_the_list_says_it_is_cut() {
    let n = MAX_STEPS + 50;
    // Nothing typed yet: the first MAX_STEPS steps, and more to ask for.
    let (steps, incomplete) = steps_proposed(&many_steps(n, ""));
    assert_eq!(steps.len(), MAX_STEPS);
    assert_eq!(steps[0], "s0");
    assert!(incomplete);
    // A word that names a step near the end finds it, prefixed names first, then the names
    // with its letters in order, and the list is whole.
    let (steps, incomplete) = steps_proposed(&many_steps(n, "s24"));
    assert_eq!(
        steps,
        [
            "s24", "s240", "s241", "s242", "s243", "s244", "s245", "s246", "s247", "s248", "s249",
            "s124", "s204", "s214", "s224", "s234"
        ]
    );
    assert!(!incomplete);
    // Letters in order, not only a prefix, in any case.
    let (steps, _) = steps_proposed(&many_steps(n, "S2_9"));
    assert!(steps.is_empty(), "{steps:?}");
    let (steps, incomplete) = steps_proposed(&many_steps(n, "S9"));
    assert_eq!(steps[0], "s9", "{steps:?}");
    assert!(steps.contains(&"s19".to_string()), "{steps:?}");
    assert!(!incomplete);
    // A flow of at most MAX_STEPS steps is never cut nor narrowed: the editor filters.
    let (steps, incomplete) = steps_proposed(&many_steps(3, "s2"));
    assert_eq!(steps, ["s0", "s1", "s2"]);
    assert!(!incomplete);
}

#[test]
fn a_word_matches_a_label_by_its_letters_in_order() {
    assert!(matches_word("greeting", "gre"));
    assert!(matches_word("get_report", "grp"));
    assert!(matches_word("Greeting", "gREE"));
    assert!(matches_word("anything", ""));
    assert!(!matches_word("greeting", "gz"));
    assert!(!matches_word("ab", "ba"));
}
