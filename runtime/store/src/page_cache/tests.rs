use rusqlite::{Connection, OpenFlags};

use super::{FORWARDED, PARKED, install};
use crate::schema::connect;

/// A fresh database in `dir`, opened as the store opens its connections.
fn database(dir: &tempfile::TempDir) -> Connection {
    assert!(
        install(),
        "the page cache is installed before SQLite starts"
    );
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = connect(&dir.path().join("t.db"), flags, false).expect("opens");
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA cache_size = -65536;
         CREATE TABLE vals (digest TEXT PRIMARY KEY NOT NULL, json TEXT NOT NULL);",
    )
    .expect("a schema");
    conn
}

/// Inserts values keyed by their digests, as the store's values are, one commit each.
fn insert(conn: &Connection, from: usize, to: usize) {
    for i in from..to {
        // Spread over the index as digests are (a multiplicative hash, four times over).
        let h = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let digest = format!("{h:016x}").repeat(4);
        conn.execute(
            "INSERT INTO vals (digest, json) VALUES (?1, ?2)",
            (&digest, i.to_string()),
        )
        .expect("inserted");
    }
}

fn counts() -> (usize, usize) {
    (
        FORWARDED.with(std::cell::Cell::get),
        PARKED.with(std::cell::Cell::get),
    )
}

#[test]
fn commits_into_a_random_index_send_no_truncation_on() {
    let dir = tempfile::tempdir().expect("a directory");
    let conn = database(&dir);
    insert(&conn, 0, 200);
    let (forwarded, parked) = counts();
    insert(&conn, 200, 5_000);
    let (forwarded_after, parked_after) = counts();
    // Balances parked pages past the end (each of which made SQLite's own cache scan its whole
    // hash table at the next commit), and no commit's truncation went on.
    assert!(parked_after - parked > 100, "{parked} → {parked_after}");
    assert_eq!(forwarded_after, forwarded);
    let (rows, check): (i64, String) = conn
        .query_row(
            "SELECT (SELECT count(*) FROM vals), (SELECT integrity_check FROM pragma_integrity_check)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("read");
    assert_eq!((rows, check.as_str()), (5_000, "ok"));
}

#[test]
fn a_rolled_back_growth_leaves_the_cache_as_the_database() {
    let dir = tempfile::tempdir().expect("a directory");
    let mut conn = database(&dir);
    insert(&conn, 0, 500);
    let tx = conn.transaction().expect("a transaction");
    insert(&tx, 500, 3_000);
    tx.rollback().expect("rolled back");
    // SQLite drops the rolled-back pages one by one; the same page numbers, taken again, hold
    // what the next transaction writes.
    insert(&conn, 3_000, 4_000);
    assert_eq!(
        rows_and_sum(&conn),
        (1_500, sum(0..500) + sum(3_000..4_000))
    );
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("checked");
    assert_eq!(check, "ok");
    let other = Connection::open(dir.path().join("t.db")).expect("opens");
    assert_eq!(
        rows_and_sum(&other),
        (1_500, sum(0..500) + sum(3_000..4_000))
    );
}

#[test]
fn a_connection_drops_its_pages_when_another_commits() {
    let dir = tempfile::tempdir().expect("a directory");
    let conn = database(&dir);
    insert(&conn, 0, 2_000);
    assert_eq!(rows_and_sum(&conn), (2_000, sum(0..2_000)));
    let (forwarded, _) = counts();
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let other = connect(&dir.path().join("t.db"), flags, false).expect("opens");
    insert(&other, 2_000, 3_000);
    // The first connection's cached pages are stale: its next read starts its cache over.
    assert_eq!(rows_and_sum(&conn), (3_000, sum(0..3_000)));
    let (forwarded_after, _) = counts();
    assert!(
        forwarded_after > forwarded,
        "{forwarded} → {forwarded_after}"
    );
}

fn rows_and_sum(conn: &Connection) -> (i64, i64) {
    conn.query_row(
        "SELECT count(*), sum(CAST(json AS INTEGER)) FROM vals",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .expect("read")
}

fn sum(range: std::ops::Range<i64>) -> i64 {
    range.sum()
}
