//! The batching VFS against SQLite's own: what a commit writes, what other connections see,
//! what a crash leaves, and a rolled-back transaction's frames.

use std::cell::Cell;
use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use super::*;

thread_local! {
    /// Writes this thread's connections made to their WALs through the system VFS.
    pub(super) static WAL_WRITES: Cell<usize> = const { Cell::new(0) };
    /// Times this thread's connections found frames still held at the shared-memory barrier,
    /// where a failed write could no longer fail the commit.
    pub(super) static HELD_AT_BARRIER: Cell<usize> = const { Cell::new(0) };
    /// Writes this thread's connections sent straight through after their transaction's commit
    /// frame (checksums rewritten in place).
    pub(super) static AFTER_COMMIT: Cell<usize> = const { Cell::new(0) };
}

/// A connection through the batching VFS, in WAL mode, with a table `t`.
fn batching(path: &Path) -> Connection {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE;
    let conn = Connection::open_with_flags_and_vfs(path, flags, name().unwrap()).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;
         CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v TEXT NOT NULL);",
    )
    .unwrap();
    conn
}

/// Another process's connection, through SQLite's own VFS.
fn plain(path: &Path) -> Connection {
    Connection::open(path).unwrap()
}

fn count(conn: &Connection) -> i64 {
    conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap()
}

/// What `PRAGMA integrity_check` says of the database `conn` opened (`ok` when whole).
fn integrity(conn: &Connection) -> String {
    conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap()
}

/// What a crash or a power cut leaves of the database `db`: it and its WAL as they are, nobody
/// closing them, copied aside and opened by another process.
fn after_a_crash(db: &Path) -> (tempfile::TempDir, Connection) {
    let copy = tempfile::tempdir().unwrap();
    std::fs::copy(db, copy.path().join("a.db")).unwrap();
    let wal = db.with_file_name("a.db-wal");
    std::fs::copy(&wal, copy.path().join("a.db-wal")).unwrap();
    let conn = plain(&copy.path().join("a.db"));
    (copy, conn)
}

/// Inserts rows `from..from + n` of 300 bytes each, in the transaction open on `conn`.
fn insert(conn: &Connection, from: i64, n: i64) {
    for k in from..from + n {
        conn.execute("INSERT INTO t VALUES (?1, ?2)", (k, "x".repeat(300)))
            .unwrap();
    }
}

/// Commits rows `from..from + n` in one transaction.
fn fill(conn: &Connection, from: i64, n: i64) {
    let tx = conn.unchecked_transaction().unwrap();
    insert(&tx, from, n);
    tx.commit().unwrap();
}

fn wal_writes(during: impl FnOnce()) -> usize {
    let before = WAL_WRITES.with(Cell::get);
    during();
    WAL_WRITES.with(Cell::get) - before
}

#[test]
fn a_commit_writes_its_frames_at_once_at_every_level() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let conn = batching(&db);
    fill(&conn, 0, 1);
    // Forty rows of 300 bytes fill three or more pages: six or more writes frame by frame.
    for (i, level) in ["NORMAL", "FULL", "OFF", "EXTRA", "normal"]
        .iter()
        .enumerate()
    {
        conn.execute_batch(&format!("PRAGMA synchronous = {level}"))
            .unwrap();
        let writes = wal_writes(|| fill(&conn, 1 + i as i64 * 100, 40));
        assert_eq!(
            writes, 1,
            "the frames of one commit at {level} go out in one write"
        );
    }
    assert_eq!(count(&conn), 201);
    assert_eq!(HELD_AT_BARRIER.with(Cell::get), 0);
}

#[test]
fn a_transaction_that_spilled_and_rewrote_its_checksums_commits_whole_without_a_sync() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let conn = batching(&db);
    let other = plain(&db);
    fill(&conn, 0, 10);
    // A page cache of a few pages makes the transaction spill frames before its end; changing
    // the spilled rows again rewrites those frames in place and then their checksums, after
    // the commit frame.
    conn.execute_batch("PRAGMA cache_size = 4").unwrap();
    let tx = conn.unchecked_transaction().unwrap();
    insert(&tx, 1000, 400);
    tx.execute("UPDATE t SET v = 'y' WHERE k BETWEEN 1000 AND 1100", [])
        .unwrap();
    tx.commit().unwrap();
    assert!(
        AFTER_COMMIT.with(Cell::get) > 0,
        "the checksums were rewritten"
    );
    assert_eq!(HELD_AT_BARRIER.with(Cell::get), 0);
    assert_eq!(count(&other), 410);
    let rewritten: i64 = other
        .query_row("SELECT count(*) FROM t WHERE v = 'y'", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rewritten, 101);
    let (_copy, recovered) = after_a_crash(&db);
    assert_eq!(count(&recovered), 410);
    assert_eq!(integrity(&recovered), "ok");
    // The next transaction is held again: one write.
    conn.execute_batch("PRAGMA cache_size = -2000").unwrap();
    assert_eq!(wal_writes(|| fill(&conn, 5000, 40)), 1);
    drop(conn);
}

#[test]
fn other_connections_see_every_commit_at_either_level() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let conn = batching(&db);
    let other = plain(&db);
    for (i, level) in ["FULL", "NORMAL", "EXTRA", "2", "1"].iter().enumerate() {
        conn.execute_batch(&format!("PRAGMA synchronous = {level}"))
            .unwrap();
        fill(&conn, i as i64 * 100, 25);
        assert_eq!(count(&other), (i as i64 + 1) * 25, "at {level}");
        assert_eq!(integrity(&other), "ok");
    }
}

#[test]
fn a_wal_grows_ahead_of_its_frames_and_a_crash_recovers_every_commit() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let conn = batching(&db);
    conn.execute_batch("PRAGMA synchronous = FULL").unwrap();
    for i in 0..30 {
        fill(&conn, i * 10, 10);
    }
    let wal = dir.path().join("a.db-wal");
    let len = std::fs::metadata(&wal).unwrap().len();
    assert!(len >= 64 << 10, "the WAL has grown ahead: {len} bytes");
    assert!(
        len.is_power_of_two() || len.is_multiple_of(1 << 20),
        "{len} bytes"
    );
    let (_copy, recovered) = after_a_crash(&db);
    assert_eq!(count(&recovered), 300);
    assert_eq!(integrity(&recovered), "ok");
    drop(conn);
}

#[test]
fn frames_of_a_transaction_that_rolled_back_are_never_written_over_later_commits() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let conn = batching(&db);
    fill(&conn, 0, 10);
    // A page cache of a few pages makes the big transaction spill frames before its end.
    conn.execute_batch("PRAGMA synchronous = FULL; PRAGMA cache_size = 4")
        .unwrap();
    {
        let tx = conn.unchecked_transaction().unwrap();
        insert(&tx, 1000, 400);
        tx.rollback().unwrap();
    }
    // Another process commits where the rolled-back frames would have gone.
    let other = plain(&db);
    fill(&other, 10, 200);
    // This connection reads and writes again: nothing it held may land now.
    assert_eq!(count(&conn), 210);
    fill(&conn, 500, 5);
    assert_eq!(integrity(&other), "ok");
    assert_eq!(count(&other), 215);
    drop(conn);
    drop(other);
    let reopened = plain(&db);
    assert_eq!(count(&reopened), 215);
}

#[test]
fn the_levels_that_sync_every_commit_are_full_and_extra() {
    for level in ["FULL", "full", "Extra", "2", "3"] {
        assert!(syncs_every_commit(level.as_bytes()), "{level}");
    }
    for level in ["NORMAL", "off", "1", "0", ""] {
        assert!(!syncs_every_commit(level.as_bytes()), "{level}");
    }
}

#[test]
fn a_wal_grows_by_powers_of_two_then_by_whole_mebibytes() {
    assert_eq!(grown_to(0), 64 << 10);
    assert_eq!(grown_to(70_000), 128 << 10);
    assert_eq!(grown_to(1 << 20), 1 << 20);
    assert_eq!(grown_to((1 << 20) + 1), 2 << 20);
    assert_eq!(grown_to((5 << 20) + 4120), 6 << 20);
}
