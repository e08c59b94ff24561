//! Tests of the checker: the reference examples, diagnostics snapshots, incrementality, FlowSpecs.

mod deep;
mod diagnostics;
mod docs;
mod edited;
mod examples;
mod incremental;
mod recovery;
mod spec;

use std::sync::Arc;

use crate::{RootDb, SourceFile, file_diagnostics};
use reel_syntax::Diagnostic;

/// A database holding one file.
pub fn db_with(path: &str, text: &str) -> (RootDb, SourceFile) {
    let db = RootDb::default();
    let file = SourceFile::new(&db, path.to_string(), "/tools".to_string(), Arc::from(text));
    (db, file)
}

/// The diagnostics of `text`.
pub fn diagnostics(text: &str) -> Vec<Diagnostic> {
    let (db, file) = db_with("test.reel", text);
    file_diagnostics(&db, file).clone()
}
