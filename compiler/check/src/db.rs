//! The salsa database: source files are the inputs, every stage of checking is a tracked query.

use std::sync::{Arc, Mutex};

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

/// The names of the queries a database executed (not those it reused), in order.
pub type ExecutionLog = Arc<Mutex<Vec<String>>>;

impl RootDb {
    /// A database that records every query it executes, to show what an edit recomputes.
    pub fn with_execution_log() -> (RootDb, ExecutionLog) {
        let log = ExecutionLog::default();
        let sink = log.clone();
        let storage = salsa::Storage::new(Some(Box::new(move |event: salsa::Event| {
            if let salsa::EventKind::WillExecute { database_key } = event.kind {
                let name = format!("{database_key:?}");
                let name = name.split('(').next().unwrap_or_default().to_string();
                if let Ok(mut log) = sink.lock() {
                    log.push(name);
                }
            }
        })));
        (RootDb { storage }, log)
    }
}

#[salsa::db]
impl salsa::Database for RootDb {}

#[salsa::db]
impl Db for RootDb {}
