//! The salsa database: source files are the inputs, every stage of checking is a tracked query.

use std::sync::Arc;

/// A `.reel` file the database knows. Handles are `Copy` and valid across revisions.
#[salsa::input(debug)]
pub struct SourceFile {
    /// The path as the user gave it; used in diagnostics and FlowSpec spans.
    #[returns(ref)]
    pub path: String,
    /// The directory user tools declared in this file run in (absolute, when known).
    #[returns(ref)]
    pub tool_dir: String,
    /// The file's text.
    #[returns(ref)]
    pub text: Arc<str>,
}

/// The database trait every query takes.
#[salsa::db]
pub trait Db: salsa::Database {}

/// The concrete database used by the CLI, the language server and tests.
#[salsa::db]
#[derive(Clone, Default)]
pub struct RootDb {
    storage: salsa::Storage<Self>,
}

#[salsa::db]
impl salsa::Database for RootDb {}

#[salsa::db]
impl Db for RootDb {}
