//! Reel's store: runs, their append-only journals, values by digest, FlowSpecs, signals and logs.
//!
//! [`Store`] is the interface the engine, the CLI and the language server use; [`SqliteStore`]
//! is the embedded implementation (SQLite in WAL mode under `.reel/`), [`PgStore`] the one on
//! PostgreSQL for workers on many machines; both keep one contract. Writes go through one
//! writer connection per process that commits them in batches (group commit across steps and
//! runs): on SQLite a caller waiting for its write commits the batch itself when the writer is
//! free, else the writer thread does; reads use their own connections.

mod api;
mod blobs;
mod checkpoint;
pub mod clock;
mod copy;
pub mod crash;
mod owner;
mod page_cache;
mod pg;
mod private;
mod query;
mod read;
mod schema;
mod sqlite;
mod vfs;
mod writer;

pub use api::*;
pub use clock::{BoxFuture, Clock, ManualClock};
pub use pg::{DueNotice, PgAuth, PgImporter, PgListener, PgStore, is_postgres_url, redact_url};
pub use private::exposure;
pub use read::parse_value;
pub use sqlite::{SqliteImporter, SqliteStore, WriterStats};
