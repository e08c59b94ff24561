//! What the engine's test binaries share: compiling a flow from its source text.

use std::sync::Arc;

use reel_compiler::{RootDb, SourceFile, build_flow, file_diagnostics};
use reel_flowspec::FlowSpec;

/// The FlowSpec of the first flow of `source`, which must check without errors.
pub fn compile(source: &str) -> FlowSpec {
    let db = RootDb::default();
    let file = SourceFile::new(&db, "t.reel".into(), "/".into(), Arc::from(source));
    let errors: Vec<_> = file_diagnostics(&db, file)
        .iter()
        .filter(|d| d.is_error())
        .cloned()
        .collect();
    assert!(errors.is_empty(), "{errors:?}\n{source}");
    let name = source
        .lines()
        .find_map(|l| l.trim().strip_prefix("flow "))
        .and_then(|l| l.split_whitespace().next())
        .expect("a flow");
    build_flow(&db, file, name).expect("the flow builds")
}
