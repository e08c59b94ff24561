//! Parser tests: the reference examples parse clean, precedence, recovery.

use super::*;

fn examples() -> Vec<(String, String)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/reference");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("the reference examples are in the repository") {
        let path = entry.expect("readable directory").path();
        if path.extension().is_some_and(|e| e == "reel") {
            let text = std::fs::read_to_string(&path).expect("readable example");
            out.push((path.display().to_string(), text));
        }
    }
    assert!(!out.is_empty());
    out
}

#[test]
fn reference_examples_parse_without_diagnostics() {
    for (path, text) in examples() {
        let parsed = parse(&text);
        assert!(
            parsed.diagnostics.is_empty(),
            "{path}: {:#?}",
            parsed.diagnostics
        );
        assert!(!parsed.file.items.is_empty(), "{path}");
    }
}

fn expr_of(src: &str) -> String {
    let parsed = parse(&format!("flow f {{\n step s = {src}\n}}"));
    assert!(
        parsed.diagnostics.is_empty(),
        "{src}: {:#?}",
        parsed.diagnostics
    );
    let Item::Flow(flow) = &parsed.file.items[0] else {
        panic!("not a flow")
    };
    let Member::Step(step) = &flow.members[0] else {
        panic!("not a step")
    };
    let StepBody::Expr(e) = &step.body else {
        panic!("not an expression step")
    };
    show(e)
}

fn show(e: &Expr) -> String {
    match &e.kind {
        ExprKind::Int(n) => n.to_string(),
        ExprKind::Name(n) => n.name.clone(),
        ExprKind::Bool(b) => b.to_string(),
        ExprKind::Binary { op, lhs, rhs, .. } => {
            format!("({} {} {})", show(lhs), op.as_str(), show(rhs))
        }
        ExprKind::Unary { op, expr } => format!("({}{})", op.as_str(), show(expr)),
        ExprKind::Member {
            base,
            name,
            optional,
        } => {
            format!(
                "{}{}{}",
                show(base),
                if *optional { "?." } else { "." },
                name.name
            )
        }
        ExprKind::Index { base, index } => format!("{}[{}]", show(base), show(index)),
        ExprKind::Call { func, args } => {
            format!(
                "{}({})",
                func.name,
                args.iter().map(show).collect::<Vec<_>>().join(", ")
            )
        }
        ExprKind::If {
            cond,
            then,
            otherwise,
        } => {
            format!(
                "(if {} then {} else {})",
                show(cond),
                show(then),
                show(otherwise)
            )
        }
        ExprKind::Paren(inner) => show(inner),
        other => format!("{other:?}"),
    }
}

#[test]
fn operators_bind_as_the_contract_says() {
    assert_eq!(expr_of("a || b && c"), "(a || (b && c))");
    assert_eq!(expr_of("a == b ?? c"), "(a == (b ?? c))");
    assert_eq!(expr_of("a ?? b + c"), "(a ?? (b + c))");
    assert_eq!(expr_of("a < b == c > d"), "((a < b) == (c > d))");
    assert_eq!(expr_of("-a * b - c % d"), "(((-a) * b) - (c % d))");
    assert_eq!(
        expr_of("!a.b?.c[0] && f(x, y)"),
        "((!a.b?.c[0]) && f(x, y))"
    );
    assert_eq!(expr_of("a ?? b ?? c"), "(a ?? (b ?? c))");
    assert_eq!(
        expr_of("if a then b else c + 1"),
        "(if a then b else (c + 1))"
    );
    assert_eq!(expr_of("input.x + env.Y"), "(input.x + env.Y)");
}

#[test]
fn expressions_continue_across_lines_after_an_operator() {
    assert_eq!(expr_of("a +\n   b"), "(a + b)");
    assert_eq!(expr_of("a\n   ?? b"), "(a ?? b)");
    assert_eq!(expr_of("if a\n then b\n else c"), "(if a then b else c)");
}

#[test]
fn a_step_starting_with_if_and_a_record_is_an_expression() {
    assert_eq!(
        expr_of("if {}.ok then 1 else 2"),
        "(if Record([]).ok then 1 else 2)"
    );
}

#[test]
fn keywords_are_keys_and_argument_names() {
    let parsed = parse(
        "flow f {\n step s = sleep { for: 1s, if: 2 }\n step t = { in: 1, \"other-key\": 2 }\n}",
    );
    assert!(parsed.diagnostics.is_empty(), "{:#?}", parsed.diagnostics);
}

#[test]
fn doc_comments_attach_to_what_follows() {
    let parsed = parse(
        "/// The flow.\n/// Second line.\nflow f {\n  /// An input.\n  input x: int\n  // plain\n  step s = x\n}\n",
    );
    let Item::Flow(flow) = &parsed.file.items[0] else {
        panic!()
    };
    assert_eq!(flow.doc.as_deref(), Some("The flow.\nSecond line."));
    let Member::Input(i) = &flow.members[0] else {
        panic!()
    };
    assert_eq!(i.doc.as_deref(), Some("An input."));
    let Member::Step(s) = &flow.members[1] else {
        panic!()
    };
    assert_eq!(s.doc, None);
}

#[test]
fn ten_independent_mistakes_give_ten_diagnostics() {
    let src = r#"flow f {
  input a: = 3
  input b string
  step c = echo { value: 1 + }
  step d = echo { value: (2 * ) }
  step = echo { value: 3 }
  step e = echo { value: [1, 2,, 3] }
  step g echo { value: 4 }
  output { x: a, y: }
}

tool t {
  kind "pure"
  exec: ["x"]
}

flow h {
  step i = echo { value: if a then b }
  step j = echo { value: {k 1} }
}
"#;
    let parsed = parse(src);
    let lines: Vec<usize> = parsed
        .diagnostics
        .iter()
        .map(|d| src[..d.primary.span.start as usize].matches('\n').count() + 1)
        .collect();
    assert_eq!(
        lines,
        vec![2, 3, 4, 5, 6, 7, 8, 9, 13, 18, 19],
        "{:#?}",
        parsed.diagnostics
    );
    // Everything that was well formed is still there.
    let Item::Flow(f) = &parsed.file.items[0] else {
        panic!()
    };
    assert!(
        f.members
            .iter()
            .any(|m| matches!(m, Member::Step(s) if s.name.name == "c"))
    );
    assert_eq!(parsed.file.items.len(), 3);
}

#[test]
fn the_parser_survives_cuts_of_every_example() {
    for (_, text) in examples() {
        for cut in (0..text.len()).filter(|i| text.is_char_boundary(*i)) {
            let _ = parse(&text[..cut]);
            let _ = parse(&text[cut..]);
        }
    }
}

/// A parse's tree, if any, and how many errors it found.
type Outcome = (Option<Vec<Item>>, usize);

/// The parse without accounts ([`EmptyErr`]) and the rich one, of a whole file.
fn both_parses(src: &str) -> (Outcome, Outcome) {
    let (tokens, _) = file_tokens(src);
    let eoi = Sp::from(src.len()..src.len());
    let (fast, fast_errors) = file_parser::<_, EmptyErr>()
        .parse(tokens[..].split_token_span(eoi))
        .into_output_errors();
    let (rich, rich_errors) = file_parser::<_, RichError<'_>>()
        .parse(tokens[..].split_token_span(eoi))
        .into_output_errors();
    ((fast, fast_errors.len()), (rich, rich_errors.len()))
}

/// What parsing a group twice rests on, tested on the file parser, which is built of the
/// group's parsers: the first parse finds an error exactly when the rich one does (so a broken
/// group is never taken for a correct one), and where neither does, both give the same tree.
/// Over every example, every fifth cut of each, and a file of mistakes.
#[test]
fn the_parse_without_accounts_finds_errors_where_the_rich_one_does_and_else_the_same_tree() {
    let mut texts: Vec<String> = Vec::new();
    for (_, text) in examples() {
        let cuts = (0..text.len()).filter(|i| text.is_char_boundary(*i) && i % 5 == 0);
        for cut in cuts {
            texts.push(text[..cut].to_string());
            texts.push(text[cut..].to_string());
        }
        texts.push(text);
    }
    texts.push("flow f {\n  step c = echo { value: 1 + }\n  step e = [1, 2,, 3]\n}\n".into());
    let (mut clean, mut broken) = (0, 0);
    for text in &texts {
        let ((fast, fast_errors), (rich, rich_errors)) = both_parses(text);
        assert_eq!(fast_errors == 0, rich_errors == 0, "{text}");
        if rich_errors == 0 {
            assert_eq!(fast, rich, "{text}");
            clean += 1;
        } else {
            broken += 1;
        }
    }
    // Both kinds were seen, many times over.
    assert!(
        clean > 100 && broken > 100,
        "{clean} clean, {broken} broken"
    );
}

#[test]
fn the_lists_a_parse_keeps_hold_no_spare_room() {
    // Each group's parse is kept for as long as the file is open, so room a collected vector
    // keeps beyond its elements is memory a big flow pays per step (four slots for one was a
    // third of its syntax). One element each, where the spare room showed.
    let src = "step a = echo { value: 1 }\nstep b = echo { value: [1] }\n\
               step c = echo { value: {k: 1} }\nstep d = echo { value: len(a) }\n\
               step e = echo { value: \"x${a}\" }\n";
    let group = parse_group(src, ChunkEnd::Close(src.len() as u32));
    assert!(group.diagnostics.is_empty(), "{:#?}", group.diagnostics);
    assert_eq!(group.members.len(), 5);
    assert_eq!(group.members.capacity(), group.members.len(), "the members");
    for member in &group.members {
        let Member::Step(step) = member else {
            panic!("not a step: {member:?}")
        };
        let StepBody::Call(call) = &step.body else {
            panic!("not a call: {step:?}")
        };
        assert_eq!(call.args.capacity(), 1, "the block of {}", step.name.name);
        let spare = match &call.args[0].value.kind {
            ExprKind::List(items) => items.capacity() - items.len(),
            ExprKind::Record(fields) => fields.capacity() - fields.len(),
            ExprKind::Call { args, .. } => args.capacity() - args.len(),
            ExprKind::Str(parts) => parts.capacity() - parts.len(),
            _ => 0,
        };
        assert_eq!(spare, 0, "the value of {}", step.name.name);
    }
}
