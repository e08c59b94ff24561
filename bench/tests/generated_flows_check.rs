//! The generator's promise: every generated flow checks with zero diagnostics, is reproducible, and its edits apply.

use std::sync::Arc;

use reel_bench::generate::{FLOW_NAME, generate};
use reel_compiler::render::render_terminal;
use reel_compiler::{RootDb, SourceFile, build_flow, file_diagnostics, flow_names};
use salsa::Setter;

const SEEDS: [u64; 4] = [1, 2, 3, 42];
const SIZES: [usize; 2] = [50, 300];

fn diagnostics_of(text: &str) -> String {
    let db = RootDb::default();
    let file = SourceFile::new(&db, "gen.reel".into(), "/".into(), Arc::from(text));
    let diags = file_diagnostics(&db, file);
    if diags.is_empty() {
        String::new()
    } else {
        format!(
            "{} diagnostics:\n{}",
            diags.len(),
            render_terminal("gen.reel", text, diags, false)
        )
    }
}

#[test]
fn generated_flows_have_no_diagnostics() {
    for steps in SIZES {
        for seed in SEEDS {
            let g = generate(steps, seed);
            let found = diagnostics_of(&g.text);
            assert!(
                found.is_empty(),
                "steps {steps}, seed {seed}: {found}\n--- source ---\n{}",
                g.text
            );
        }
    }
}

#[test]
fn generated_flows_build_a_flowspec_with_every_step() {
    for seed in SEEDS {
        let g = generate(300, seed);
        let db = RootDb::default();
        let file = SourceFile::new(
            &db,
            "gen.reel".into(),
            "/".into(),
            Arc::from(g.text.as_str()),
        );
        assert_eq!(flow_names(&db, file), vec![FLOW_NAME.to_string()]);
        let spec = build_flow(&db, file, FLOW_NAME).expect("the flow builds");
        assert_eq!(spec.steps.len(), 300);
        assert_eq!(g.steps, 300);
        // The store keeps its binary form beside the JSON; it reads back as the spec.
        let binary = reel_flowspec::FlowSpec::from_binary(&spec.to_binary());
        assert_eq!(binary.as_ref(), Some(&spec), "seed {seed}");
        // A realistic DAG: every step but the first reads one to three earlier steps.
        for s in &spec.steps[1..] {
            let reads = s.deps.len() + s.after.iter().filter(|a| !s.deps.contains(a)).count();
            assert!((1..=4).contains(&reads), "{} reads {reads} steps", s.id);
        }
        assert_eq!(spec.tools.len(), 3, "every user tool is called");
    }
}

#[test]
fn the_same_seed_gives_the_same_flow() {
    assert_eq!(generate(200, 7).text, generate(200, 7).text);
    assert_ne!(generate(200, 7).text, generate(200, 8).text);
}

#[test]
fn the_literal_edit_keeps_the_flow_clean_and_the_type_edit_changes_a_type() {
    for seed in SEEDS {
        let g = generate(300, seed);
        let edited = g.literal_edit.apply(&g.text);
        assert_eq!(edited.len(), g.text.len() + 1);
        let found = diagnostics_of(&edited);
        assert!(
            found.is_empty(),
            "seed {seed}, after the literal edit: {found}"
        );

        // Incrementally, on one database, back and forth.
        let mut db = RootDb::default();
        let file = SourceFile::new(
            &db,
            "gen.reel".into(),
            "/".into(),
            Arc::from(g.text.as_str()),
        );
        assert!(file_diagnostics(&db, file).is_empty());
        let typed = g.type_edit.apply(&g.text);
        file.set_text(&mut db).to(Arc::from(typed.as_str()));
        let quota = build_flow(&db, file, FLOW_NAME).map(|spec| {
            spec.steps
                .iter()
                .find(|s| s.id.starts_with("quota_"))
                .map(|s| s.ty.clone())
        });
        if let Some(Some(ty)) = quota {
            assert_eq!(ty, reel_flowspec::Type::Float);
        }
        file.set_text(&mut db).to(Arc::from(g.text.as_str()));
        assert!(file_diagnostics(&db, file).is_empty());
    }
}
