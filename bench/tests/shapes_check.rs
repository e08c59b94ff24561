//! The runtime benchmarks' flow shapes check with zero diagnostics and build to the steps they
//! say, so `scale-bench` and `run-bench` measure what their tables name.

use std::sync::Arc;

use reel_bench::shapes::{FLOW_NAME, foreach_echo, sequential_echo};
use reel_compiler::{RootDb, SourceFile, build_flow, file_diagnostics};

/// The FlowSpec of `text`'s flow: (steps, the `foreach` steps' concurrency).
fn built(text: &str) -> (usize, Vec<u32>) {
    let db = RootDb::default();
    let file = SourceFile::new(&db, "shape.reel".into(), "/".into(), Arc::from(text));
    let diags = file_diagnostics(&db, file);
    assert!(diags.is_empty(), "{diags:?}\n--- source ---\n{text}");
    let spec = build_flow(&db, file, FLOW_NAME).expect("the shape builds");
    let concurrency = spec
        .steps
        .iter()
        .filter(|s| s.foreach.is_some())
        .map(|s| s.concurrency)
        .collect();
    (spec.steps.len(), concurrency)
}

#[test]
fn the_shapes_check_clean_and_have_the_steps_they_say() {
    assert_eq!(built(&sequential_echo(1)), (1, vec![]));
    assert_eq!(built(&sequential_echo(50)), (50, vec![]));
    assert_eq!(built(&foreach_echo(1_000_000, 1000)), (1, vec![1000]));
}
