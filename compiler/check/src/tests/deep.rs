//! The nesting limit end to end: the deepest expression of each shape that the limit admits goes
//! through every recursive pass (parse, check, lower, FlowSpec write and read, evaluation,
//! formatting) on a 2 MiB stack, the size of the language server's and the runtime's worker
//! threads; one level deeper is one `syntax.too-deep` diagnostic and nothing else.

use reel_syntax::nesting::MAX_NESTING;

use super::{db_with, diagnostics};
use crate::build_flow;

/// A shape: its name, its expression `n` levels deep, and the deepest `n` the limit admits.
type Shape = (&'static str, fn(usize) -> String, usize);

fn shapes() -> Vec<Shape> {
    // The innermost `1` is a level too.
    let ops = MAX_NESTING as usize - 1;
    let groups = MAX_NESTING as usize - 1;
    // A string and the `${ }` in it are two levels.
    let strings = (MAX_NESTING as usize - 1) / 2;
    vec![
        ("sum", |n| format!("1{}", " + 1".repeat(n)), ops),
        ("negations", |n| format!("{}1", "-".repeat(n)), ops),
        ("nots", |n| format!("{}true", "!".repeat(n)), ops),
        (
            "ifs",
            |n| format!("{}1{}", "if true then ".repeat(n), " else 0".repeat(n)),
            ops,
        ),
        (
            "parens",
            |n| format!("{}1{}", "(".repeat(n), ")".repeat(n)),
            groups,
        ),
        (
            "calls",
            |n| format!("{}1{}", "to_int(".repeat(n), ")".repeat(n)),
            groups,
        ),
        (
            "lists",
            |n| format!("{}1{}", "[".repeat(n), "]".repeat(n)),
            groups,
        ),
        (
            "records",
            |n| format!("{}1{}", "{ a: ".repeat(n), " }".repeat(n)),
            groups,
        ),
        (
            "strings",
            |n| format!("{}1{}", "\"${".repeat(n), "}\"".repeat(n)),
            strings,
        ),
    ]
}

fn flow(expr: &str) -> String {
    format!("flow deep {{\n  step s = {expr}\n  step t = 2\n  output {{ s: s, t: t }}\n}}\n")
}

/// Runs `f` on a thread with a 2 MiB stack, as tokio's workers have.
fn on_small_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(f)
        .expect("a thread starts")
        .join()
        .expect("the passes fit a 2 MiB stack");
}

#[test]
fn the_deepest_admitted_expressions_pass_every_stage_on_a_small_stack() {
    for (name, make, n) in shapes() {
        let text = flow(&make(n));
        on_small_stack(move || {
            let (db, file) = db_with("deep.reel", &text);
            let diags = crate::file_diagnostics(&db, file);
            assert!(diags.is_empty(), "{name}: {diags:#?}");
            let spec = build_flow(&db, file, "deep").expect("builds");
            let back = reel_flowspec::FlowSpec::from_json(&spec.to_json()).expect("reads back");
            assert_eq!(back, spec, "{name}");
            let value = spec.steps[0].value.as_ref().expect("an expression step");
            reel_eval::eval_const(value).unwrap_or_else(|e| panic!("{name}: {e:?}"));
            let formatted = reel_syntax::format::format(&text).expect("formats");
            assert_eq!(
                reel_syntax::format::format(&formatted).ok(),
                Some(formatted)
            );
        });
    }
}

#[test]
fn one_level_deeper_is_one_diagnostic_and_the_rest_is_checked() {
    for (name, make, n) in shapes() {
        let text = flow(&make(n + 1)) + "flow other {\n  step u = missing\n}\n";
        on_small_stack(move || {
            let codes: Vec<&str> = diagnostics(&text).iter().map(|d| d.code.as_str()).collect();
            assert_eq!(
                codes,
                ["syntax.too-deep", "name.unknown"],
                "{name}: the deep step is cut alone"
            );
        });
    }
}

#[test]
fn far_deeper_input_is_refused_the_same_way() {
    let texts = [
        flow(&format!("1{}", " + 1".repeat(50_000))),
        flow(&format!("{}1{}", "(".repeat(50_000), ")".repeat(50_000))),
        flow(&format!("{}1{}", "[".repeat(50_000), "]".repeat(50_000))),
        flow(&format!("{}1", "-".repeat(50_000))),
        format!(
            "flow deep {{\n  input x: {}int{}\n}}\n",
            "list<".repeat(50_000),
            ">".repeat(50_000)
        ),
    ];
    for text in texts {
        on_small_stack(move || {
            let codes: Vec<&str> = diagnostics(&text).iter().map(|d| d.code.as_str()).collect();
            assert_eq!(codes, ["syntax.too-deep"]);
        });
    }
}
