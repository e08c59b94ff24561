//! The salsa database: source files are the inputs, every stage of checking is a tracked query.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use reel_syntax::outline::OutlineMemo;

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
pub trait Db: salsa::Database {
    /// The outlines of the files' last texts, for the layout to update rather than redo.
    fn outlines(&self) -> &OutlineCache;
}

/// The last outline of each file, kept outside salsa so that the layout of a file's next text
/// re-scans only the lines an edit touched. A pure cache: an outline updated from any earlier
/// text of the file is the one a full scan gives (`reel_syntax::outline::OutlineMemo`), so
/// clones of the database share it freely and a stale entry only costs a full scan.
#[derive(Clone, Default)]
pub struct OutlineCache(Arc<Mutex<HashMap<SourceFile, Arc<OutlineMemo>>>>);

impl OutlineCache {
    /// The outline of `file`'s `text`, from the file's last outline when there is one.
    pub fn outline(&self, file: SourceFile, text: &Arc<str>) -> Arc<OutlineMemo> {
        let last = self.0.lock().ok().and_then(|m| m.get(&file).cloned());
        if let Some(last) = &last
            && Arc::ptr_eq(last.text(), text)
        {
            return last.clone();
        }
        let memo = Arc::new(match last {
            Some(last) => last.update(text.clone()),
            None => OutlineMemo::scan(text.clone()),
        });
        if let Ok(mut m) = self.0.lock() {
            m.insert(file, memo.clone());
        }
        memo
    }
}

/// The concrete database used by the CLI, the language server and tests.
#[salsa::db]
#[derive(Clone, Default)]
pub struct RootDb {
    storage: salsa::Storage<Self>,
    outlines: OutlineCache,
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
        (
            RootDb {
                storage,
                outlines: OutlineCache::default(),
            },
            log,
        )
    }
}

#[salsa::db]
impl salsa::Database for RootDb {}

#[salsa::db]
impl Db for RootDb {
    fn outlines(&self) -> &OutlineCache {
        &self.outlines
    }
}
