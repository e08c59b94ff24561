//! The database schema, its migrations, and opening connections with the store's settings.

use std::fs;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior};

use crate::api::StoreError;
use crate::private;

/// How long a connection waits for another process's write lock before failing.
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Migrations in order; the schema version is how many have been applied.
const MIGRATIONS: &[&str] = &[V1, V2, V3, V4, V5, V6, V7];

/// The schema version this binary writes.
pub(crate) const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

// `vals` rather than `values`: VALUES is an SQL keyword. Values and specs are rowid tables
// because their rows can be large (up to 64 KiB), which WITHOUT ROWID tables handle badly.
const V1: &str = "
CREATE TABLE runs (
    id TEXT PRIMARY KEY NOT NULL,
    flow TEXT NOT NULL,
    flow_digest TEXT NOT NULL,
    source TEXT,
    source_abs TEXT,
    cwd TEXT NOT NULL,
    parent TEXT,
    status TEXT NOT NULL CHECK (status IN
        ('running', 'waiting', 'succeeded', 'failed', 'canceled', 'quarantined')),
    created_at INTEGER NOT NULL,
    ended_at INTEGER,
    due_at INTEGER,
    waiting_on TEXT NOT NULL DEFAULT '[]',
    signal_pending INTEGER NOT NULL DEFAULT 0 CHECK (signal_pending IN (0, 1)),
    lease_owner TEXT,
    lease_pid INTEGER,
    lease_host TEXT,
    lease_started INTEGER,
    lease_expires_at INTEGER,
    lease_token INTEGER NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1)),
    output_digest TEXT,
    error TEXT,
    keep_for_ms INTEGER,
    durability TEXT NOT NULL CHECK (durability IN ('fast', 'durable')),
    next_seq INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX runs_status_due ON runs (status, due_at);
CREATE INDEX runs_source_flow_created ON runs (source_abs, flow, created_at);
CREATE INDEX runs_flow_created ON runs (flow, created_at);
CREATE INDEX runs_created ON runs (created_at);

CREATE TABLE journal (
    run TEXT NOT NULL,
    seq INTEGER NOT NULL,
    at INTEGER NOT NULL,
    kind TEXT NOT NULL,
    step TEXT,
    idx INTEGER,
    attempt INTEGER,
    data TEXT NOT NULL,
    PRIMARY KEY (run, seq)
) STRICT, WITHOUT ROWID;

CREATE TABLE vals (
    digest TEXT PRIMARY KEY NOT NULL,
    json TEXT,
    size INTEGER NOT NULL,
    external INTEGER NOT NULL CHECK (external IN (0, 1)),
    CHECK ((external = 1) = (json IS NULL))
) STRICT;

CREATE TABLE specs (
    digest TEXT PRIMARY KEY NOT NULL,
    json TEXT NOT NULL
) STRICT;

CREATE TABLE signals (
    run TEXT NOT NULL,
    seq INTEGER NOT NULL,
    name TEXT NOT NULL,
    payload_digest TEXT NOT NULL,
    sent_at INTEGER NOT NULL,
    consumed_by INTEGER,
    PRIMARY KEY (run, seq)
) STRICT, WITHOUT ROWID;

CREATE TABLE logs (
    id INTEGER PRIMARY KEY,
    run TEXT NOT NULL,
    step TEXT NOT NULL,
    idx INTEGER,
    attempt INTEGER NOT NULL,
    at INTEGER NOT NULL,
    text TEXT NOT NULL
) STRICT;
CREATE INDEX logs_run ON logs (run, id);
";

// The views `reel sql` documents (docs/runtime.md, "SQL views"): their columns, names and
// meanings are kept stable across versions, whatever the tables under them become, and are the
// same as the PostgreSQL store's (`pg/schema.rs`), so one query answers alike on both. Times
// are milliseconds since the Unix epoch. A step's line and a call's tool come from the run's
// FlowSpec (NULL when it has no such step).
const V2: &str = "
CREATE VIEW reel_runs AS
SELECT id, flow, status, parent, source, created_at, ended_at,
       json_extract(error, '$.code') AS error_code,
       json_extract(error, '$.step') AS error_step,
       json_extract(error, '$.message') AS error_message
FROM runs;

CREATE VIEW reel_events AS
SELECT run, seq, at, kind, step, idx, attempt, data FROM journal;

CREATE VIEW reel_steps AS
SELECT g.run, g.step,
       COALESCE((SELECT CASE e.kind WHEN 'step_succeeded' THEN 'succeeded'
                                    WHEN 'step_failed' THEN 'failed' ELSE 'skipped' END
                 FROM journal e WHERE e.run = g.run AND e.seq = g.end_seq), 'started') AS status,
       g.attempts, g.first_at, g.last_at,
       (SELECT json_extract(e.data, '$.error.code') FROM journal e
        WHERE e.run = g.run AND e.seq = g.end_seq AND e.kind = 'step_failed') AS error_code,
       (SELECT json_extract(s.value, '$.span.line')
        FROM runs r JOIN specs sp ON sp.digest = r.flow_digest, json_each(sp.json, '$.steps') s
        WHERE r.id = g.run AND json_extract(s.value, '$.id') = g.step) AS line
FROM (SELECT run, step,
             MAX(CASE WHEN kind IN ('step_succeeded', 'step_failed', 'step_skipped')
                      THEN seq END) AS end_seq,
             MAX(attempt) AS attempts, MIN(at) AS first_at, MAX(at) AS last_at
      FROM journal WHERE step IS NOT NULL GROUP BY run, step) g;

CREATE VIEW reel_calls AS
SELECT c.run, c.step, c.idx, c.attempt,
       (SELECT json_extract(s.value, '$.tool')
        FROM runs r JOIN specs sp ON sp.digest = r.flow_digest, json_each(sp.json, '$.steps') s
        WHERE r.id = c.run AND json_extract(s.value, '$.id') = c.step) AS tool,
       c.started_at, c.ended_at,
       CASE WHEN c.succeeded = 1 THEN 'succeeded' WHEN c.failed = 1 THEN 'failed'
            WHEN c.unknown = 1 THEN 'unknown' ELSE 'started' END AS outcome,
       c.error_code, c.idempotency_key
FROM (SELECT run, step, idx, attempt,
             MIN(CASE WHEN kind IN ('step_started', 'call_reused') THEN at END) AS started_at,
             MAX(CASE WHEN kind IN ('call_succeeded', 'effect_recorded', 'call_failed')
                      THEN at END) AS ended_at,
             MAX(CASE WHEN kind IN ('call_succeeded', 'effect_recorded') THEN 1 ELSE 0 END)
                 AS succeeded,
             MAX(CASE WHEN kind = 'call_failed' THEN 1 ELSE 0 END) AS failed,
             MAX(CASE WHEN kind = 'unknown_outcome' THEN 1 ELSE 0 END) AS unknown,
             MAX(CASE WHEN kind = 'call_failed' THEN json_extract(data, '$.error.code') END)
                 AS error_code,
             MAX(CASE WHEN kind IN ('step_started', 'effect_recorded', 'unknown_outcome')
                      THEN json_extract(data, '$.key') END) AS idempotency_key
      FROM journal
      WHERE step IS NOT NULL AND attempt IS NOT NULL AND kind IN ('step_started',
            'call_reused', 'call_succeeded', 'effect_recorded', 'call_failed', 'unknown_outcome')
      GROUP BY run, step, idx, attempt) c;
";

// A worker's look at what is due reads candidates through indexes, not every parked run: due
// timers through `runs_status_due`, a cancel asked for or a signal pending through this one
// (the PostgreSQL store's index of the same name), so that the look costs what is due, not
// what the store keeps waiting (`read::due_runs`).
const V3: &str = "
CREATE INDEX IF NOT EXISTS runs_waiting_flagged ON runs (created_at)
    WHERE status = 'waiting' AND (cancel_requested = 1 OR signal_pending = 1);
";

// Version 4 changes what rows mean, not the tables: from it on a value of at most 63 bytes of
// canonical JSON is named in the journal by itself (`=` and its JSON,
// `reel_flowspec::canonical::name_text`) and has no row in `vals`. A reel of an earlier
// version would take such a name for a value that is missing, so it must refuse the store,
// which the version makes it do. Rows written before keep their digests and read as they did.
const V4: &str = "-- short values are named by themselves";

// A FlowSpec's binary form (`reel_flowspec::FlowSpec::to_binary`), a cache of its JSON that a
// replay reads several times faster; `layout` names the build's layout, and a form of another
// layout is read as missing. Apart from `specs` so that reading it does not walk the JSON's
// overflow pages.
const V5: &str = "
CREATE TABLE IF NOT EXISTS spec_binaries (
    digest TEXT PRIMARY KEY NOT NULL,
    layout INTEGER NOT NULL,
    bytes BLOB NOT NULL
) STRICT;
";

// The rows of calls a resume found with an unknown outcome, which `reel runs` shows for every
// run it lists (`read::unknown_outcome_rows`): through this index the listing reads those few
// rows, not every run's journal. A partial index, so an append of any other kind adds no
// entry to it.
const V6: &str = "
CREATE INDEX IF NOT EXISTS journal_unknown_outcome ON journal (run, seq)
    WHERE kind = 'unknown_outcome';
";

// What a clean needs to know which values and FlowSpecs a remaining run references, kept so
// that a clean reads the runs it removes, the runs that have not ended and those that ended
// since the last one, not every journal of the store (`writer::clean`). `refs` holds the
// digests an ended run references (its stored values and its FlowSpec) once a clean has read
// it, and `refs_kept` says they are there: it is 0 for a new run, set to 0 again whenever a
// run's status is set (so a redriven run is read again once it ends again) or a signal comes
// for it, and set to 1 only by the clean that reads an ended run. The index holds the ended
// runs no clean has read, and only those: a run's entry is written when it ends and goes at
// the next clean, so the writes of runs that have not ended pay nothing for it.
// The column is added by `COLUMNS`, before this runs.
const V7: &str = "
CREATE INDEX IF NOT EXISTS runs_refs_unkept ON runs (id)
    WHERE refs_kept = 0 AND status IN ('succeeded', 'failed', 'canceled');
CREATE TABLE IF NOT EXISTS refs (
    digest TEXT NOT NULL,
    run TEXT NOT NULL,
    PRIMARY KEY (digest, run)
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS refs_run ON refs (run);
";

/// Columns a migration adds to a table: the version whose migration adds it, the table, the
/// column and its definition. Apart from the migrations' SQL because SQLite has no `ADD COLUMN
/// IF NOT EXISTS`, and a migration must be safe to apply again (a store whose version was
/// set back, as the tests do, or a copy of its schema by hand).
const COLUMNS: &[(usize, &str, &str, &str)] = &[(
    7,
    "runs",
    "refs_kept",
    "INTEGER NOT NULL DEFAULT 0 CHECK (refs_kept IN (0, 1))",
)];

/// The store at `path` cannot be opened, and why; a write lock held past [`BUSY_TIMEOUT`]
/// says who may hold it, since SQLite's own message ("database is locked") does not, and a
/// store this user may not write says where else a store can go.
pub(crate) fn open_error(path: &Path, message: impl std::fmt::Display) -> StoreError {
    let mut message = message.to_string();
    // io::Error's own words are lower case, the OS's capitalized.
    let lower = message.to_lowercase();
    if message.contains("database is locked") {
        message.push_str(&format!(
            ": another process has held its write lock for more than {} s (a `sqlite3` shell or \
             another program in the middle of a transaction, a backup); end that and try again",
            BUSY_TIMEOUT.as_secs()
        ));
    } else if ["permission denied", "readonly"]
        .iter()
        .any(|words| lower.contains(words))
    {
        message.push_str(
            ": this user cannot write there; make the folder writable, or put the store \
             elsewhere with REEL_HOME=DIR (or a PostgreSQL store with REEL_STORE_URL)",
        );
    }
    StoreError::Open {
        path: path.display().to_string(),
        message,
    }
}

/// Makes sure the database file exists with its schema before anyone writes to it.
///
/// A new database is built beside its place under a temporary name and linked into place only
/// once its schema is written, so a crash never leaves a `reel.db` that looks like a new, empty
/// store; and a `reel.db` of zero bytes is refused, never taken for a new store, because Reel
/// never leaves one: it was truncated, and its runs are gone from it.
pub(crate) fn create_database(path: &Path) -> Result<(), StoreError> {
    match fs::metadata(path) {
        Ok(meta) if meta.len() == 0 => {
            return Err(open_error(
                path,
                "the database file is empty (0 bytes): it was truncated or its disk lost it, \
                 so the runs it held are gone from it; restore it from a backup, or move it \
                 away to start a new store",
            ));
        }
        Ok(_) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(open_error(path, e)),
    }
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map_or_else(|| "reel.db".into(), |n| n.to_string_lossy().into_owned());
    let tmp = path.with_file_name(format!(
        ".{name}.{}.{}.new",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let built = (|| {
        drop(private::create_new_file(&tmp).map_err(|e| open_error(&tmp, e))?);
        build_schema(&tmp)?;
        fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(|e| open_error(&tmp, e))?;
        // A link never replaces: when another process put its database in place first, that
        // one is the store and this copy is dropped.
        match fs::hard_link(&tmp, path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(open_error(path, e)),
        }
        if let Some(dir) = path.parent() {
            // Best effort: the link is in place for this process either way.
            let _ = fs::File::open(dir).and_then(|d| d.sync_all());
        }
        Ok(())
    })();
    for leftover in ["", "-wal", "-shm"] {
        let mut name = tmp.clone().into_os_string();
        name.push(leftover);
        let _ = fs::remove_file(name);
    }
    built
}

/// Opens a connection to the database at `path`: every connection of the store opens here,
/// so that the process's SQLite is set up before it starts (its page cache, see `page_cache`).
/// `batched`: through the VFS that sends a durable commit's WAL frames in one write (`vfs`),
/// for the writer's connection.
pub(crate) fn connect(
    path: &Path,
    flags: OpenFlags,
    batched: bool,
) -> rusqlite::Result<Connection> {
    crate::page_cache::install();
    match batched.then(crate::vfs::name).flatten() {
        Some(vfs) => Connection::open_with_flags_and_vfs(path, flags, vfs),
        None => Connection::open_with_flags(path, flags),
    }
}

/// Leaves the WAL as it is when `conn` closes, rather than copying it back into the database
/// (two syncs) and removing it, which took 6.5 ms of a 1,000-step `reel run`'s 65; the next
/// process to open the store reads the WAL's frames back instead (0.8 ms for that run's 3.9
/// MB, bench/README.md, session 29). The writer bounds what is left this way: see
/// `Checkpointer::finish`.
pub(crate) fn keep_wal_on_close(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
        .map(|_| ())
}

/// Writes the schema into the new, empty database file at `path` and leaves it in WAL mode,
/// without syncing anything: the caller syncs the file once, whole, before linking it into
/// place, and until then it is a temporary file nobody takes for a store, so a crash while it
/// is built loses nothing. (Built as the writer's connection would build it, a new store cost
/// ten syncs, a sixth of a 1,000-step `reel run` on a fresh store.) The result is the same file:
/// the same schema, in WAL mode.
fn build_schema(path: &Path) -> Result<(), StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut conn = connect(path, flags, false).map_err(|e| open_error(path, e))?;
    let mode = |conn: &Connection, mode: &str| -> Result<String, StoreError> {
        conn.pragma_update_and_check(None, "journal_mode", mode, |r| r.get(0))
            .map_err(|e| open_error(path, e))
    };
    mode(&conn, "OFF")?;
    conn.execute_batch("PRAGMA synchronous = OFF;")
        .map_err(|e| open_error(path, e))?;
    migrate(&mut conn).map_err(|e| match e {
        Migrate::Sqlite(e) => open_error(path, e),
        Migrate::Refused(message) => open_error(path, message),
    })?;
    let wal = mode(&conn, "WAL")?;
    if !wal.eq_ignore_ascii_case("wal") {
        return Err(open_error(
            path,
            format!("the database cannot use write-ahead logging (journal mode is {wal})"),
        ));
    }
    // Closing the only connection leaves nothing in the write-ahead log and removes it.
    conn.close().map_err(|(_, e)| open_error(path, e))
}

/// Opens (creating if needed) the writer's connection, in WAL mode, and migrates the schema.
pub(crate) fn open_writer(path: &Path) -> Result<Connection, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    // A durable commit's WAL frames go out in one write (see `vfs`).
    let mut conn = connect(path, flags, true).map_err(|e| open_error(path, e))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .and_then(|()| keep_wal_on_close(&conn))
        .map_err(|e| open_error(path, e))?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .map_err(|e| open_error(path, e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(open_error(
            path,
            format!("the database cannot use write-ahead logging (journal mode is {mode})"),
        ));
    }
    // A 64 MiB page cache keeps the values index (random digests) and the journal's tail in
    // memory; a WAL left larger than 64 MiB is cut back when it restarts.
    conn.execute_batch(
        "PRAGMA synchronous = NORMAL; PRAGMA temp_store = MEMORY; PRAGMA cache_size = -65536;
         PRAGMA journal_size_limit = 67108864;",
    )
    .map_err(|e| open_error(path, e))?;
    conn.set_prepared_statement_cache_capacity(64);
    migrate(&mut conn).map_err(|e| match e {
        Migrate::Sqlite(e) => open_error(path, e),
        Migrate::Refused(message) => open_error(path, message),
    })?;
    Ok(conn)
}

/// Opens a read-only connection to an existing store, checking that its schema is this one.
pub(crate) fn open_reader(path: &Path) -> Result<Connection, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = connect(path, flags, false).map_err(|e| open_error(path, e))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .and_then(|()| keep_wal_on_close(&conn))
        .map_err(|e| open_error(path, e))?;
    // The writer's 64 MiB page cache: a replay looks up every recorded result by its digest,
    // all over the values index; with SQLite's default of 2 MiB each lookup read its pages
    // from the file again.
    conn.execute_batch("PRAGMA cache_size = -65536;")
        .map_err(|e| open_error(path, e))?;
    conn.set_prepared_statement_cache_capacity(32);
    Ok(conn)
}

/// Checks, on a read-only connection, that the store's schema is the one this binary reads.
pub(crate) fn check_version(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let has_meta: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'meta')",
            [],
            |r| r.get(0),
        )
        .map_err(|e| open_error(path, e))?;
    if !has_meta {
        return Err(open_error(
            path,
            "this is not a Reel store (no schema version)",
        ));
    }
    let version = stored_version(conn).map_err(|e| open_error(path, e))?;
    match version.cmp(&SCHEMA_VERSION) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Greater => Err(open_error(path, newer_message(version))),
        std::cmp::Ordering::Less => Err(open_error(
            path,
            format!(
                "the store has schema version {version}, older than this reel's \
                 {SCHEMA_VERSION}; run a reel command that writes (such as `reel runs`) to \
                 upgrade it"
            ),
        )),
    }
}

fn newer_message(version: i64) -> String {
    format!(
        "the store has schema version {version}, newer than this reel knows \
         ({SCHEMA_VERSION}); upgrade reel to use it"
    )
}

fn stored_version(conn: &Connection) -> rusqlite::Result<i64> {
    Ok(conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get::<_, i64>(0),
        )
        .optional()?
        .unwrap_or(0))
}

enum Migrate {
    Sqlite(rusqlite::Error),
    Refused(String),
}

impl From<rusqlite::Error> for Migrate {
    fn from(e: rusqlite::Error) -> Self {
        Migrate::Sqlite(e)
    }
}

/// Applies the migrations the store lacks, all in one transaction so a crash leaves either
/// the old schema or the new one.
fn migrate(conn: &mut Connection) -> Result<(), Migrate> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY NOT NULL, value ANY) STRICT;",
    )?;
    let version = stored_version(&tx)?;
    if version > SCHEMA_VERSION {
        return Err(Migrate::Refused(newer_message(version)));
    }
    if version == SCHEMA_VERSION {
        return Ok(());
    }
    for (at, migration) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(version).unwrap_or(0))
    {
        for (_, table, column, definition) in COLUMNS.iter().filter(|c| c.0 == at + 1) {
            let there: bool = tx.query_row(
                "SELECT EXISTS (SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2)",
                [table, column],
                |r| r.get(0),
            )?;
            if !there {
                tx.execute_batch(&format!(
                    "ALTER TABLE {table} ADD COLUMN {column} {definition};"
                ))?;
            }
        }
        tx.execute_batch(migration)?;
    }
    tx.execute(
        "INSERT INTO meta (key, value) VALUES ('schema_version', ?1)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [SCHEMA_VERSION],
    )?;
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_this_user_cannot_write_says_where_else_it_can_go() {
        // Tests run as root, whom permissions do not stop: the errors are made, as the
        // directory's creation and SQLite give them to a user who may not write there.
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let readonly = "attempt to write a readonly database";
        for err in [
            open_error(Path::new("/srv/.reel"), denied),
            open_error(Path::new("/srv/.reel/reel.db"), readonly),
        ] {
            assert_eq!(err.code(), "store.open");
            let text = err.to_string();
            assert!(text.contains("make the folder writable"), "{text}");
            assert!(text.contains("REEL_HOME=DIR"), "{text}");
        }
        let other = open_error(Path::new("/srv/.reel"), "disk I/O error").to_string();
        assert!(!other.contains("REEL_HOME"), "{other}");
    }

    #[test]
    fn migrating_twice_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("reel.db");
        drop(open_writer(&path).unwrap());
        let conn = open_writer(&path).unwrap();
        assert_eq!(stored_version(&conn).unwrap(), SCHEMA_VERSION);
        let reader = open_reader(&path).unwrap();
        check_version(&reader, &path).unwrap();
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("reel.db");
        let conn = open_writer(&path).unwrap();
        conn.execute(
            "UPDATE meta SET value = ?1 WHERE key = 'schema_version'",
            [SCHEMA_VERSION + 1],
        )
        .unwrap();
        drop(conn);
        let err = open_writer(&path).unwrap_err();
        assert_eq!(err.code(), "store.open");
        assert!(
            err.to_string().contains("newer than this reel knows"),
            "{err}"
        );
        let reader = open_reader(&path).unwrap();
        let err = check_version(&reader, &path).unwrap_err();
        assert!(err.to_string().contains("upgrade reel"), "{err}");
    }

    #[test]
    fn a_new_database_has_the_schema_in_wal_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("reel.db");
        create_database(&path).unwrap();
        let bytes = fs::read(&path).unwrap();
        // The header's read and write versions are 2 in WAL mode.
        assert_eq!(&bytes[18..20], &[2, 2]);
        let left: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, vec!["reel.db".to_string()]);
        let reader = open_reader(&path).unwrap();
        check_version(&reader, &path).unwrap();
        let tables: i64 = reader
            .query_row(
                "SELECT COUNT(*) FROM sqlite_schema WHERE type IN ('table', 'view')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        // runs, journal, vals, specs, spec_binaries, signals, logs, refs, meta and the four
        // views.
        assert_eq!(tables, 13);
    }

    #[test]
    fn tables_are_strict() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open_writer(&dir.path().join("reel.db")).unwrap();
        let err = conn
            .execute(
                "INSERT INTO journal (run, seq, at, kind, data) VALUES ('r', 'x', 0, 'k', '{}')",
                [],
            )
            .unwrap_err();
        assert!(
            err.to_string().to_lowercase().contains("cannot store"),
            "{err}"
        );
    }
}
