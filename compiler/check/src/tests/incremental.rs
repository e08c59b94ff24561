//! What an edit recomputes: only the edited step, and the steps whose inputs' types it changed.

use std::sync::Arc;

use salsa::Setter;

use crate::{RootDb, SourceFile, file_diagnostics};

fn flow(middle: &str) -> String {
    let mut src = String::from("flow f {\n  input n: int = 1\n");
    for i in 0..20 {
        if i == 10 {
            src.push_str(middle);
        } else if i == 0 {
            src.push_str("  step s0 = echo { value: input.n }\n");
        } else {
            src.push_str(&format!("  step s{i} = echo {{ value: s{} }}\n", i - 1));
        }
    }
    src.push_str("  output s19\n}\n");
    src
}

fn executions(log: &crate::db::ExecutionLog, query: &str) -> usize {
    let log = log.lock().expect("log lock");
    log.iter().filter(|q| *q == query).count()
}

#[test]
fn an_edit_inside_one_step_rechecks_only_that_step() {
    let (mut db, log) = RootDb::with_execution_log();
    let text = flow("  step s10 = echo { value: s9 + 1 }\n");
    let file = SourceFile::new(&db, "f.reel".into(), "/".into(), Arc::from(text.as_str()));
    assert!(file_diagnostics(&db, file).is_empty());
    assert_eq!(executions(&log, "step_check"), 20);

    // A longer literal: every later step moves, but none is checked again.
    log.lock().unwrap().clear();
    let edited = flow("  step s10 = echo { value: s9 + 1000 }\n");
    file.set_text(&mut db).to(Arc::from(edited.as_str()));
    assert!(file_diagnostics(&db, file).is_empty());
    assert_eq!(
        executions(&log, "step_check"),
        1,
        "{:?}",
        log.lock().unwrap()
    );

    // A comment above everything moves every span: still one step... none, in fact.
    log.lock().unwrap().clear();
    let commented = format!("// a comment\n{edited}");
    file.set_text(&mut db).to(Arc::from(commented.as_str()));
    assert!(file_diagnostics(&db, file).is_empty());
    assert_eq!(
        executions(&log, "step_check"),
        0,
        "{:?}",
        log.lock().unwrap()
    );
}

#[test]
fn an_edit_that_changes_a_type_rechecks_the_steps_that_read_it() {
    let (mut db, log) = RootDb::with_execution_log();
    let text = flow("  step s10 = echo { value: s9 + 1 }\n");
    let file = SourceFile::new(&db, "f.reel".into(), "/".into(), Arc::from(text.as_str()));
    file_diagnostics(&db, file);
    log.lock().unwrap().clear();
    // s10 becomes a string: s11 reads it and is re-checked (its type changes too), and so on
    // down the chain that echoes it; the steps before s10 are not.
    let edited = flow("  step s10 = echo { value: to_string(s9) }\n");
    file.set_text(&mut db).to(Arc::from(edited.as_str()));
    assert!(file_diagnostics(&db, file).is_empty());
    assert_eq!(
        executions(&log, "step_check"),
        10,
        "{:?}",
        log.lock().unwrap()
    );
}
