//! A step typed key by key into the middle of a big flow, as the language server's database sees
//! it: each key that leaves a delimiter open (`len(`, `len("ab`) parses again only the group it
//! is in, not the flow, and its diagnostics are those of the whole-file parse.

use std::sync::Arc;

use reel_compiler::{RootDb, SourceFile, file_diagnostics};
use salsa::Setter;

fn big_flow(n: usize) -> String {
    let mut src = String::from("flow big {\n  input n: int = 1\n");
    for i in 0..n {
        src.push_str(&format!("  step step_{i} = len(\"v{i}\") + input.n\n"));
    }
    src.push_str("  output step_0\n}\n");
    src
}

fn count(log: &[String], query: &str) -> usize {
    log.iter().filter(|q| *q == query).count()
}

#[test]
fn a_key_inside_an_open_delimiter_reparses_its_group_only() {
    let before = big_flow(1500);
    let at = before.find("  step step_700 ").expect("the middle step");
    let typed = "  step typed = len(\"abcdef\") + 1\n";
    let (mut db, log) = RootDb::with_execution_log();
    let file = SourceFile::new(&db, "f.reel".into(), "/".into(), Arc::from(before.as_str()));
    assert!(!file_diagnostics(&db, file).iter().any(|d| d.is_error()));
    let mut open = 0;
    // From the key that writes `(` to the one before `)`.
    let from = typed.find('(').expect("a call") + 1;
    let to = typed.find(')').expect("a call");
    for i in from - 1..=to {
        let text = format!("{}{}\n{}", &before[..at], &typed[..i], &before[at..]);
        log.lock().unwrap().clear();
        file.set_text(&mut db).to(Arc::from(text.as_str()));
        let diags = file_diagnostics(&db, file).clone();
        let log = log.lock().unwrap().clone();
        if i < from {
            // The key before: the new line itself.
            continue;
        }
        assert_eq!(count(&log, "parse_file"), 0, "{:?}: {log:?}", &typed[..i]);
        assert_eq!(count(&log, "piece_parse"), 0, "{:?}: {log:?}", &typed[..i]);
        assert_eq!(count(&log, "group_parse"), 1, "{:?}: {log:?}", &typed[..i]);
        // The syntax errors are the whole file's.
        let whole: Vec<_> = reel_syntax::parse(&text)
            .diagnostics
            .into_iter()
            .map(|d| (d.code, d.primary.span, d.message))
            .collect();
        let got: Vec<_> = diags
            .iter()
            .filter(|d| d.code.as_str().starts_with("syntax."))
            .map(|d| (d.code, d.primary.span, d.message.clone()))
            .collect();
        assert_eq!(got, whole, "{:?}", &typed[..i]);
        open += 1;
    }
    assert!(open >= 8, "{open}");
}
