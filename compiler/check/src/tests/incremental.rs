//! What an edit recomputes: the steps parsed with the edited one (its group), the steps that
//! read it (whose checks stop there when they come out equal), and the steps whose inputs'
//! types it changed.

use std::sync::Arc;

use reel_syntax::ast::Member;
use salsa::Setter;

use crate::queries::{file_flows, flow_members};
use crate::{RootDb, SourceFile, file_diagnostics};

/// The names of the steps parsed together with step `name` (its group), in the file's first flow.
fn group_of(db: &RootDb, file: SourceFile, name: &str) -> Vec<String> {
    let flow = file_flows(db, file)[0];
    let members = flow_members(db, flow);
    let at = members.steps[&members.ids[name]];
    at.group
        .source(db)
        .members()
        .iter()
        .filter_map(|m| match m {
            Member::Step(s) => Some(s.name.name.clone()),
            _ => None,
        })
        .collect()
}

/// How many step checks an edit of step `edited`, read by step `reader`, runs again: the steps
/// of the edited step's group, and the reader when it is not among them.
fn rechecked(db: &RootDb, file: SourceFile, edited: &str, reader: &str) -> usize {
    let group = group_of(db, file, edited);
    assert!(group.len() <= 32, "{group:?}");
    group.len() + usize::from(!group.iter().any(|s| s == reader))
}

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
fn an_edit_inside_one_step_rechecks_it_and_the_steps_that_read_it() {
    let (mut db, log) = RootDb::with_execution_log();
    let text = flow("  step s10 = echo { value: s9 + 1 }\n");
    let file = SourceFile::new(&db, "f.reel".into(), "/".into(), Arc::from(text.as_str()));
    assert!(file_diagnostics(&db, file).is_empty());
    assert_eq!(executions(&log, "step_check"), 20);

    // A longer literal: every later step moves, but only s10 and the steps parsed with it are
    // checked again, and s11, which reads it, finds its own check unchanged, so s12 is not.
    log.lock().unwrap().clear();
    let edited = flow("  step s10 = echo { value: s9 + 1000 }\n");
    file.set_text(&mut db).to(Arc::from(edited.as_str()));
    assert!(file_diagnostics(&db, file).is_empty());
    assert_eq!(
        executions(&log, "step_check"),
        rechecked(&db, file, "s10", "s11"),
        "{:?}",
        log.lock().unwrap()
    );

    // A comment above everything moves every span, and checks nothing again.
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
    // down the chain that echoes it; of the steps before s10, only those parsed with it are.
    let edited = flow("  step s10 = echo { value: to_string(s9) }\n");
    file.set_text(&mut db).to(Arc::from(edited.as_str()));
    assert!(file_diagnostics(&db, file).is_empty());
    let mut expected: std::collections::BTreeSet<String> =
        (10..20).map(|i| format!("s{i}")).collect();
    expected.extend(group_of(&db, file, "s10"));
    assert_eq!(
        executions(&log, "step_check"),
        expected.len(),
        "{:?}",
        log.lock().unwrap()
    );
}

/// A flow of `n` steps, each reading the one before, with comments between some of them.
fn long_flow(n: usize, literal: &str, between: &str) -> String {
    let mut src =
        String::from("flow f {\n  input n: int = 1\n  step s0 = echo { value: input.n }\n");
    for i in 1..n {
        if i == n / 2 {
            src.push_str(&format!(
                "  step s{i} = echo {{ value: {{ text: \"{literal}\", n: s{} }} }}\n",
                i - 1
            ));
            src.push_str(between);
        } else {
            src.push_str(&format!(
                "  /// step {i}\n  step s{i} = echo {{ value: s{} }}\n",
                i - 1
            ));
        }
    }
    src.push_str(&format!("  output s{}\n}}\n", n - 1));
    src
}

/// What one edit executes again, by query name, after a check of `before`; the number of
/// diagnostics after it; and how many step checks it may re-run when it edits step `edited`
/// (read by `reader`).
fn executed_by_edit(before: &str, after: &str) -> (Vec<String>, usize) {
    let (log, diags, _) = edit_of_step(before, after, None);
    (log, diags)
}

fn edit_of_step(
    before: &str,
    after: &str,
    step: Option<(&str, &str)>,
) -> (Vec<String>, usize, usize) {
    let (mut db, log) = RootDb::with_execution_log();
    let file = SourceFile::new(&db, "f.reel".into(), "/".into(), Arc::from(before));
    let diags = file_diagnostics(&db, file);
    assert!(diags.is_empty(), "{diags:?}");
    log.lock().unwrap().clear();
    file.set_text(&mut db).to(Arc::from(after));
    let diags = file_diagnostics(&db, file).len();
    let log = log.lock().unwrap().clone();
    let rechecks = step.map_or(0, |(edited, reader)| rechecked(&db, file, edited, reader));
    (log, diags, rechecks)
}

fn count(log: &[String], query: &str) -> usize {
    log.iter().filter(|q| *q == query).count()
}

#[test]
fn a_literal_edit_reparses_one_group_and_reruns_a_constant_number_of_queries() {
    for n in [50, 500, 2000] {
        let (edited, reader) = (format!("s{}", n / 2), format!("s{}", n / 2 + 1));
        let (log, diags, rechecks) = edit_of_step(
            &long_flow(n, "abc", ""),
            &long_flow(n, "abcd", ""),
            Some((&edited, &reader)),
        );
        assert_eq!(diags, 0);
        // One parse: the group of a few members the edited step is parsed with.
        assert_eq!(count(&log, "group_parse"), 1, "{log:?}");
        assert_eq!(count(&log, "piece_parse"), 0, "{log:?}");
        assert_eq!(count(&log, "parse_file"), 0, "{log:?}");
        // Only the steps of that group are checked again (a group is at most 32 chunks, one
        // member each, more only where members cannot be parsed apart), and the one that reads
        // the edited step.
        let checks = count(&log, "step_check");
        assert!(
            rechecks > 1 && checks == rechecks,
            "{checks} step_check: {log:?}"
        );
        // The flow-wide queries that read only heads and references are not re-run.
        for query in ["flow_members", "flow_declarations", "flow_dag"] {
            assert_eq!(count(&log, query), 0, "{query}: {log:?}");
        }
        // Nothing runs once per step of the flow: a rechecked step runs its check and its part
        // of the signature; the rest is a fixed set of per-file and per-flow queries.
        assert!(
            log.len() <= 2 * checks + 16,
            "{n} steps ran {} queries: {log:?}",
            log.len()
        );
    }
}

#[test]
fn a_step_typed_key_by_key_rechecks_its_group_not_the_flow() {
    // Each key changes the flow's names (a member that does not parse yet declares the names it
    // writes; then a new step's name grows). A key that leaves the other groups as they were
    // (one group parsed again) checks again that group's steps, not every step of the flow.
    let n = 500;
    let before = long_flow(n, "abc", "");
    let at = before.find("  /// step 300\n").unwrap();
    let typed = "  step typed = len(\"abc\") + s10 + 2\n";
    let (mut db, log) = RootDb::with_execution_log();
    let file = SourceFile::new(&db, "f.reel".into(), "/".into(), Arc::from(before.as_str()));
    assert!(file_diagnostics(&db, file).is_empty());
    let mut one_group = 0;
    let mut whole_signatures = 0;
    for (i, _) in typed.char_indices().skip(1).chain([(typed.len(), ' ')]) {
        let text = format!("{}{}{}", &before[..at], &typed[..i], &before[at..]);
        log.lock().unwrap().clear();
        file.set_text(&mut db).to(Arc::from(text.as_str()));
        let _ = file_diagnostics(&db, file);
        let log = log.lock().unwrap();
        // Whatever the key changed (a new name, a broken member's names, a reference), the
        // per-step queries that look names up run for the steps whose names share a shard with
        // a changed one, not for every step; the flow is never parsed whole.
        for query in ["group_report", "step_check"] {
            let runs = count(&log, query);
            assert!(runs <= n / 5, "{:?} ran {query} {runs} times", &typed[..i]);
        }
        assert_eq!(count(&log, "piece_parse"), 0, "{:?}", &typed[..i]);
        // The flow-wide tables are not built again: the declarations of the shards of the
        // edited group's names are (22 or 23 shards on each key that changes a name), and the
        // member table not at all. The whole signature is built once, for the suggestions of
        // the one key that writes an unknown name (`l`).
        assert_eq!(count(&log, "flow_members"), 0, "{:?}", &typed[..i]);
        let shards = count(&log, "shard_declarations");
        assert!(shards <= 40, "{:?} rebuilt {shards} shards", &typed[..i]);
        whole_signatures += count(&log, "flow_declarations");
        if count(&log, "group_parse") == 1 {
            one_group += 1;
            // The edited group's steps, the steps that read them, and the steps whose names
            // share a member shard with a step the key moved (a step's place is read from its
            // shard, not kept in a memo per step): 23 on most keys, 41 on the first letter of
            // a name, never the flow.
            let checks = count(&log, "step_check");
            assert!(
                checks <= 50,
                "{:?} rechecked {checks} of {n} steps",
                &typed[..i]
            );
        }
    }
    let diags = file_diagnostics(&db, file);
    assert!(!diags.iter().any(|d| d.is_error()), "{diags:?}");
    assert!(one_group >= 10, "{one_group} keys parsed one group again");
    assert_eq!(
        whole_signatures, 1,
        "the whole signature was built {whole_signatures} times"
    );
}

#[test]
fn comments_and_blank_lines_between_steps_recheck_nothing() {
    let before = long_flow(100, "abc", "");
    for between in [
        "\n",
        "  // a comment between steps\n",
        "\n  // two\n\n  // comments\n",
    ] {
        let (log, diags) = executed_by_edit(&before, &long_flow(100, "abc", between));
        assert_eq!(diags, 0);
        // At most the group of members around the new lines is parsed again; each step's
        // syntax, relative to its own start, is the same, so nothing is checked again.
        assert!(count(&log, "group_parse") <= 1, "{log:?}");
        for query in [
            "piece_parse",
            "step_dependencies",
            "step_check",
            "step_type",
        ] {
            assert_eq!(count(&log, query), 0, "{between:?} ran {query}: {log:?}");
        }
    }
    // Blanks at the end of a step's line: its group is parsed again, to the same syntax.
    let trailing = before.replacen("value: s9 }", "value: s9 }   ", 1);
    assert_ne!(trailing, before);
    let (log, _) = executed_by_edit(&before, &trailing);
    assert_eq!(count(&log, "group_parse"), 1, "{log:?}");
    assert_eq!(count(&log, "step_check"), 0, "{log:?}");
}

#[test]
fn a_syntax_error_in_one_step_is_reported_there_and_the_rest_is_still_checked() {
    let before = long_flow(100, "abc", "");
    let broken = before.replacen(
        "step s20 = echo { value: s19 }",
        "step s20 = echo { value: }",
        1,
    );
    let (log, _) = executed_by_edit(&before, &broken);
    // Only the broken step's group is parsed again.
    assert_eq!(count(&log, "group_parse"), 1, "{log:?}");
    let (db, file) = super::db_with("f.reel", &broken);
    let diags = file_diagnostics(&db, file);
    let at = broken.find("value: }").unwrap() + "value: ".len();
    assert_eq!(diags.len(), 1, "{diags:?}");
    assert_eq!(diags[0].primary.span.start as usize, at, "{diags:?}");
    // A type error after it is still found.
    let typed = broken.replacen("value: s60 }", "value: s60 + true }", 1);
    let (db, file) = super::db_with("f.reel", &typed);
    assert_eq!(file_diagnostics(&db, file).len(), 2);
}

/// Diagnostics that point into two groups of a long flow (declarations are placed by member,
/// warnings by group) land on the same bytes as in a flow short enough to be one group, and stay
/// right after an edit moves everything below it.
#[test]
fn diagnostics_across_groups_point_at_the_right_members() {
    let mut src = long_flow(200, "abc", "");
    // A second `s150` far below the first, an unused input, and an unused pure step.
    src = src.replacen(
        "  output s199\n",
        "  step s150 = echo { value: 1 }\n  input spare: int = 2\n  step idle = 1 + 1\n  output s199\n",
        1,
    );
    let check = |text: &str| {
        let diags = super::diagnostics(text);
        diags
            .iter()
            .map(|d| {
                let primary = &text[d.primary.span.range()];
                let secondary: Vec<&str> =
                    d.secondary.iter().map(|l| &text[l.span.range()]).collect();
                (d.code.as_str(), primary.to_string(), secondary.join(","))
            })
            .collect::<Vec<_>>()
    };
    let found = check(&src);
    assert!(
        found.contains(&("name.duplicate", "s150".into(), "s150".into())),
        "{found:?}"
    );
    let dup = super::diagnostics(&src)
        .into_iter()
        .find(|d| d.code == "name.duplicate")
        .unwrap();
    // The primary label is on the second `s150`, the secondary on the first.
    assert!(
        dup.primary.span.start > dup.secondary[0].span.start,
        "{dup:?}"
    );
    assert_eq!(
        &src[dup.secondary[0].span.start as usize..],
        &src[src.find("step s150 =").unwrap() + 5..]
    );
    // Fixing the duplicate leaves the warnings, each on its member's name.
    let fixed = src.replacen(
        "step s150 = echo { value: 1 }",
        "step s999 = echo { value: 1 }",
        1,
    );
    warns_of_spare_and_idle(&check(&fixed));
    // An edit high above moves every span; on the same database (the reports and warnings are
    // reused, placed again), the diagnostics are those of a fresh check of the edited text.
    let edited = fixed.replacen("\"abc\"", "\"a much longer literal\"", 1);
    assert_ne!(edited, fixed);
    let (mut db, file) = super::db_with("test.reel", &fixed);
    assert_eq!(file_diagnostics(&db, file).len(), 2);
    file.set_text(&mut db).to(Arc::from(edited.as_str()));
    let incremental = file_diagnostics(&db, file).clone();
    assert_eq!(incremental, super::diagnostics(&edited));
    warns_of_spare_and_idle(&check(&edited));
}

/// The two warnings of the flow above, each on its member's name.
fn warns_of_spare_and_idle(found: &[(&str, String, String)]) {
    for (code, name) in [("lint.unused-input", "spare"), ("lint.unused-step", "idle")] {
        assert!(
            found.contains(&(code, name.to_string(), String::new())),
            "{found:?}"
        );
    }
}
