//! Reading the store: a small pool of read-only connections and the queries run on them.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::{Connection, OptionalExtension, Row, params, params_from_iter};
use serde::Deserialize;
use serde_json::Value;

use crate::api::{
    EventRow, Flow, JournalRow, LogRow, Owner, RawEventRow, RawJournalRow, RunFilter, RunRow,
    RunStatus, SignalRow, StoreError,
};
use crate::schema;
use crate::writer::{int, lock, parse_durability, sqlite};

/// How many idle read connections are kept for reuse.
const MAX_IDLE: usize = 8;

/// Read-only connections to the database, opened on demand and reused.
pub(crate) struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
}

impl Readers {
    /// A pool for the database at `path`, starting with `first` if given.
    pub(crate) fn new(path: &Path, first: Option<Connection>) -> Readers {
        Readers {
            path: path.to_path_buf(),
            idle: Mutex::new(first.into_iter().collect()),
        }
    }

    /// Closes the idle connections: read-only ones cannot fold the WAL back into the database
    /// when they are the last to close, so they go before the writer's.
    pub(crate) fn close_idle(&self) {
        lock(&self.idle).clear();
    }

    /// Runs `f` on a connection of its own, so readers on several threads do not queue, and a
    /// callback that reads again (from inside `read_journal`) gets another connection.
    pub(crate) fn with<R>(
        &self,
        f: impl FnOnce(&Connection) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        let conn = match lock(&self.idle).pop() {
            Some(conn) => conn,
            None => schema::open_reader(&self.path)?,
        };
        let result = f(&conn);
        let mut idle = lock(&self.idle);
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
        result
    }
}

/// The `runs` columns [`run_from`] reads, in its order.
const RUN_COLUMNS: &str = "id, flow, flow_digest, source, source_abs, cwd, parent, status,
    created_at, ended_at, due_at, waiting_on, signal_pending, lease_owner, lease_pid, lease_host,
    lease_started, lease_expires_at, lease_token, cancel_requested, output_digest, error,
    keep_for_ms, durability, next_seq";

fn bad(what: &str, e: impl std::fmt::Display) -> rusqlite::Error {
    rusqlite::Error::ToSqlConversionFailure(format!("{what}: {e}").into())
}

fn unsigned(n: i64, what: &str) -> rusqlite::Result<u64> {
    u64::try_from(n).map_err(|e| bad(what, e))
}

/// The lease holder stored in four columns from `at`, if any.
pub(crate) fn owner_at(r: &Row<'_>, at: usize) -> rusqlite::Result<Option<Owner>> {
    let id: Option<String> = r.get(at)?;
    let pid: Option<i64> = r.get(at + 1)?;
    let host: Option<String> = r.get(at + 2)?;
    let started: Option<i64> = r.get(at + 3)?;
    Ok(match (id, pid, host, started) {
        (Some(id), Some(pid), Some(host), Some(started)) => Some(Owner {
            id,
            pid: u32::try_from(pid).map_err(|e| bad("lease_pid", e))?,
            host,
            started: unsigned(started, "lease_started")?,
        }),
        _ => None,
    })
}

fn run_from(r: &Row<'_>) -> rusqlite::Result<RunRow> {
    let status: String = r.get(7)?;
    let waiting_on: String = r.get(11)?;
    let error: Option<String> = r.get(21)?;
    let durability: String = r.get(23)?;
    Ok(RunRow {
        id: r.get(0)?,
        flow: r.get(1)?,
        flow_digest: r.get(2)?,
        source: r.get(3)?,
        source_abs: r.get(4)?,
        cwd: r.get(5)?,
        parent: r.get(6)?,
        status: RunStatus::parse(&status).ok_or_else(|| bad("status", &status))?,
        created_at: r.get(8)?,
        ended_at: r.get(9)?,
        due_at: r.get(10)?,
        waiting_on: serde_json::from_str(&waiting_on).map_err(|e| bad("waiting_on", e))?,
        signal_pending: r.get(12)?,
        lease_owner: owner_at(r, 13)?,
        lease_expires_at: r.get(17)?,
        lease_token: unsigned(r.get(18)?, "lease_token")?,
        cancel_requested: r.get(19)?,
        output_digest: r.get(20)?,
        error: error
            .map(|e| serde_json::from_str(&e))
            .transpose()
            .map_err(|e| bad("error", e))?,
        keep_for_ms: r
            .get::<_, Option<i64>>(22)?
            .map(|k| unsigned(k, "keep_for_ms"))
            .transpose()?,
        durability: parse_durability(&durability),
        next_seq: unsigned(r.get(24)?, "next_seq")?,
    })
}

/// A run by id.
pub(crate) fn run(conn: &Connection, id: &str) -> Result<Option<RunRow>, StoreError> {
    conn.prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"))
        .and_then(|mut s| s.query_row([id], run_from).optional())
        .map_err(sqlite)
}

/// Ids starting with `prefix`, in order.
pub(crate) fn find_runs(conn: &Connection, prefix: &str) -> Result<Vec<String>, StoreError> {
    // A range on the primary key, so the lookup is an index seek rather than a scan; the
    // upper bound is the prefix followed by the highest character.
    let upper = format!("{prefix}\u{10FFFF}");
    let mut stmt = conn
        .prepare_cached("SELECT id FROM runs WHERE id >= ?1 AND id < ?2 ORDER BY id")
        .map_err(sqlite)?;
    let ids = stmt
        .query_map([prefix, upper.as_str()], |r| r.get::<_, String>(0))
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(sqlite)?;
    Ok(ids
        .into_iter()
        .filter(|id| id.starts_with(prefix))
        .collect())
}

/// Runs matching `filter`, newest first.
pub(crate) fn list_runs(conn: &Connection, filter: &RunFilter) -> Result<Vec<RunRow>, StoreError> {
    let mut sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE 1 = 1");
    let mut args: Vec<SqlValue> = Vec::new();
    if let Some(status) = filter.status {
        sql.push_str(" AND status = ?");
        args.push(SqlValue::Text(status.as_str().to_string()));
    }
    if let Some(flow) = &filter.flow {
        sql.push_str(" AND flow = ?");
        args.push(SqlValue::Text(flow.clone()));
    }
    if let Some(source) = &filter.source_abs {
        sql.push_str(" AND source_abs = ?");
        args.push(SqlValue::Text(source.clone()));
    }
    sql.push_str(" ORDER BY created_at DESC, id DESC");
    if let Some(limit) = filter.limit {
        sql.push_str(" LIMIT ?");
        args.push(SqlValue::Integer(i64::try_from(limit).unwrap_or(i64::MAX)));
    }
    let mut stmt = conn.prepare_cached(&sql).map_err(sqlite)?;
    stmt.query_map(params_from_iter(args), run_from)
        .and_then(|rows| rows.collect())
        .map_err(sqlite)
}

fn hole(run: &str, seq: u64, message: impl std::fmt::Display) -> StoreError {
    StoreError::Hole {
        run: run.to_string(),
        seq,
        message: message.to_string(),
    }
}

/// Streams a run's journal from `from_seq` in order, one row in memory at a time. A row that
/// cannot be decoded, or a missing one, is a hole: the error, and nothing after it is read.
pub(crate) fn read_journal(
    conn: &Connection,
    run: &str,
    from_seq: u64,
    f: &mut dyn FnMut(EventRow) -> Flow,
) -> Result<(), StoreError> {
    let mut first_hole = None;
    read_journal_rows(conn, run, from_seq, &mut |row| match row {
        JournalRow::Event(event) => f(event),
        JournalRow::Hole { seq, message } => {
            first_hole = Some(hole(run, seq, message));
            Flow::Stop
        }
    })?;
    first_hole.map_or(Ok(()), Err)
}

/// Streams a run's journal from `from_seq` in order, handing a row that cannot be decoded, or
/// each missing one, over as a hole and going on.
pub(crate) fn read_journal_rows(
    conn: &Connection,
    run: &str,
    from_seq: u64,
    f: &mut dyn FnMut(JournalRow) -> Flow,
) -> Result<(), StoreError> {
    read_journal_raw(conn, run, from_seq, &mut |row| match row {
        RawJournalRow::Event(raw) => f(match raw.to_row(run) {
            Ok(event) => JournalRow::Event(event),
            Err(message) => JournalRow::Hole {
                seq: raw.seq,
                message,
            },
        }),
        RawJournalRow::Hole { seq, message } => f(JournalRow::Hole {
            seq,
            message: message.to_string(),
        }),
    })
}

/// Streams a run's journal from `from_seq` in order, each row borrowed from SQLite's buffer
/// with its data as text; a row whose columns cannot be read, or each missing one, is handed
/// over as a hole and the reading goes on. One prepared statement, one pass.
pub(crate) fn read_journal_raw(
    conn: &Connection,
    run: &str,
    from_seq: u64,
    f: &mut dyn FnMut(RawJournalRow<'_>) -> Flow,
) -> Result<(), StoreError> {
    // One read transaction: the run's length and its rows come from the same snapshot, so
    // rows committed meanwhile neither show up half nor look like missing ones.
    let tx = conn.unchecked_transaction().map_err(sqlite)?;
    let next_seq: Option<i64> = tx
        .prepare_cached("SELECT next_seq FROM runs WHERE id = ?1")
        .and_then(|mut s| s.query_row([run], |r| r.get(0)).optional())
        .map_err(sqlite)?;
    let Some(next_seq) = next_seq else {
        return Err(StoreError::NotFound(run.to_string()));
    };
    let next_seq = u64::try_from(next_seq).unwrap_or(0);
    let mut stmt = tx
        .prepare_cached(
            "SELECT seq, at, kind, step, idx, attempt, data FROM journal
             WHERE run = ?1 AND seq >= ?2 ORDER BY seq",
        )
        .map_err(sqlite)?;
    let mut rows = stmt.query(params![run, int(from_seq)?]).map_err(sqlite)?;
    let mut expected = from_seq;
    const MISSING: &str = "the row is missing";
    while let Some(row) = rows.next().map_err(sqlite)? {
        let seq = row
            .get::<_, i64>(0)
            .ok()
            .and_then(|s| u64::try_from(s).ok());
        // A row whose number cannot be read stands where the next one was expected.
        let seq = seq.unwrap_or(expected);
        while expected < seq {
            let hole = RawJournalRow::Hole {
                seq: expected,
                message: MISSING,
            };
            if let Flow::Stop = f(hole) {
                return Ok(());
            }
            expected += 1;
        }
        let flow = match raw_event(row, seq) {
            Ok(event) => f(RawJournalRow::Event(event)),
            Err(message) => f(RawJournalRow::Hole {
                seq,
                message: &message,
            }),
        };
        if let Flow::Stop = flow {
            return Ok(());
        }
        expected = seq + 1;
    }
    while expected < next_seq {
        let hole = RawJournalRow::Hole {
            seq: expected,
            message: MISSING,
        };
        if let Flow::Stop = f(hole) {
            return Ok(());
        }
        expected += 1;
    }
    Ok(())
}

/// Every `unknown_outcome` row, by run and position, the run last (the other columns where
/// `raw_event`, and the PostgreSQL store's `event_from`, read a journal row's): both stores'
/// statement. Its `WHERE` is the index's own, so the index is used.
pub(crate) const UNKNOWN_OUTCOME_ROWS: &str = "SELECT seq, at, kind, step, idx, attempt, data, run
    FROM journal WHERE kind = 'unknown_outcome' ORDER BY run, seq";

/// Every `unknown_outcome` row whose columns read, by run and position, through the index of
/// such rows (`journal_unknown_outcome`); a row whose columns do not read is a hole, which
/// only a read of its journal reports.
pub(crate) fn unknown_outcome_rows(conn: &Connection) -> Result<Vec<EventRow>, StoreError> {
    let mut stmt = conn.prepare_cached(UNKNOWN_OUTCOME_ROWS).map_err(sqlite)?;
    let mut rows = stmt.query([]).map_err(sqlite)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(sqlite)? {
        let (Ok(seq), Ok(run)) = (row.get::<_, i64>(0), row.get::<_, String>(7)) else {
            continue;
        };
        let Ok(seq) = u64::try_from(seq) else {
            continue;
        };
        if let Ok(event) = raw_event(row, seq).and_then(|raw| raw.to_row(&run)) {
            out.push(event);
        }
    }
    Ok(out)
}

/// The steps of a run with a `step_succeeded` row, without decoding any row's data.
pub(crate) fn succeeded_steps(
    conn: &Connection,
    run: &str,
) -> Result<std::collections::HashSet<String>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            // No DISTINCT: the set removes repeats, and SQLite would build a temporary
            // b-tree of every name to do it (about 60% of this query for 33,333 steps).
            "SELECT step FROM journal
             WHERE run = ?1 AND kind = 'step_succeeded' AND step IS NOT NULL",
        )
        .map_err(sqlite)?;
    stmt.query_map([run], |r| r.get::<_, String>(0))
        .and_then(|rows| rows.collect())
        .map_err(sqlite)
}

/// The columns of a journal row, borrowed from SQLite's buffer; its data is left as text.
fn raw_event<'r>(row: &'r Row<'_>, seq: u64) -> Result<RawEventRow<'r>, String> {
    let err = |e: rusqlite::Error| e.to_string();
    let small = |n: Option<i64>, what: &str| {
        n.map(|n| u32::try_from(n).map_err(|e| format!("{what}: {e}")))
            .transpose()
    };
    // Borrowed when the column holds text; otherwise the error a copy would have given.
    let text = |i: usize| -> Result<Option<&'r str>, String> {
        let copied = || row.get::<_, Option<String>>(i).map(|_| None).map_err(err);
        match row.get_ref(i).map_err(err)? {
            ValueRef::Null => Ok(None),
            ValueRef::Text(t) => std::str::from_utf8(t).map(Some).or_else(|_| copied()),
            _ => copied(),
        }
    };
    let at = row.get(1).map_err(err)?;
    let kind = match text(2)? {
        Some(kind) => kind,
        None => {
            let null = row.get::<_, String>(2).err().map(err);
            return Err(null.unwrap_or_default());
        }
    };
    Ok(RawEventRow {
        seq,
        at,
        kind,
        step: text(3)?,
        index: small(row.get(4).map_err(err)?, "idx")?,
        attempt: small(row.get(5).map_err(err)?, "attempt")?,
        data: row
            .get_ref(6)
            .map_err(err)?
            .as_str()
            .map_err(|e| e.to_string())?,
    })
}

/// What a run's tools printed, in order.
pub(crate) fn logs(conn: &Connection, run: &str) -> Result<Vec<LogRow>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT run, step, idx, attempt, at, text FROM logs WHERE run = ?1 ORDER BY id",
        )
        .map_err(sqlite)?;
    stmt.query_map([run], |r| {
        Ok(LogRow {
            run: r.get(0)?,
            step: r.get(1)?,
            index: r.get(2)?,
            attempt: r.get(3)?,
            at: r.get(4)?,
            text: r.get(5)?,
        })
    })
    .and_then(|rows| rows.collect())
    .map_err(sqlite)
}

/// A run's unconsumed signals in the order sent.
pub(crate) fn pending_signals(conn: &Connection, run: &str) -> Result<Vec<SignalRow>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT run, seq, name, payload_digest, sent_at, consumed_by FROM signals
             WHERE run = ?1 AND consumed_by IS NULL ORDER BY seq",
        )
        .map_err(sqlite)?;
    stmt.query_map([run], |r| {
        Ok(SignalRow {
            run: r.get(0)?,
            seq: unsigned(r.get(1)?, "seq")?,
            name: r.get(2)?,
            payload_digest: r.get(3)?,
            sent_at: r.get(4)?,
            consumed_by: r
                .get::<_, Option<i64>>(5)?
                .map(|n| unsigned(n, "consumed_by"))
                .transpose()?,
        })
    })
    .and_then(|rows| rows.collect())
    .map_err(sqlite)
}

/// What [`due_runs`] reads: waiting runs first, in due order, then running ones whose holder
/// is gone. A signal wakes a waiting run only when it is one the run waits for: one kept for a
/// later wait must not make a worker take the run up again and again. (A run some live process
/// still holds is left out afterwards: claiming it would only say HeldBy.) The waiting runs
/// are read as two sets, each through its index (a run whose timer is due; one not due with a
/// cancel asked for or a signal pending), so that a look reads what is due and not every
/// parked run (`runs_waiting_flagged`, schema version 3).
pub(crate) const DUE_RUNS: [&str; 2] = [
    "SELECT id, lease_owner, lease_pid, lease_host, lease_started, lease_expires_at,
            due_at IS NULL AS undated, due_at, created_at
     FROM runs INDEXED BY runs_status_due
     WHERE status = 'waiting' AND due_at <= ?1
     UNION ALL
     SELECT id, lease_owner, lease_pid, lease_host, lease_started, lease_expires_at,
            due_at IS NULL, due_at, created_at
     FROM runs INDEXED BY runs_waiting_flagged
     WHERE status = 'waiting' AND (cancel_requested = 1 OR signal_pending = 1)
       AND NOT (due_at IS NOT NULL AND due_at <= ?1)
       AND (cancel_requested = 1 OR EXISTS (
            SELECT 1 FROM signals s, json_each(runs.waiting_on) w
            WHERE s.run = runs.id AND s.consumed_by IS NULL AND s.name = w.value))
     ORDER BY undated, due_at, created_at",
    "SELECT id, lease_owner, lease_pid, lease_host, lease_started, lease_expires_at
     FROM runs
     WHERE status = 'running'
       AND (lease_owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= ?1
            OR lease_host = ?2)
     ORDER BY lease_expires_at, created_at",
];

/// Runs a worker should take up (see [`crate::StoreRead::due_runs`]).
pub(crate) fn due_runs(
    conn: &Connection,
    now_ms: i64,
    limit: usize,
) -> Result<Vec<String>, StoreError> {
    let mut due = Vec::new();
    if limit == 0 {
        return Ok(due);
    }
    let host = Owner::this_process().host;
    for (i, sql) in DUE_RUNS.into_iter().enumerate() {
        let mut stmt = conn.prepare_cached(sql).map_err(sqlite)?;
        let rows = if i == 0 {
            stmt.query(params![now_ms])
        } else {
            stmt.query(params![now_ms, host])
        };
        let mut rows = rows.map_err(sqlite)?;
        while let Some(r) = rows.next().map_err(sqlite)? {
            let id: String = r.get(0).map_err(sqlite)?;
            let holder = owner_at(r, 1).map_err(sqlite)?;
            let expires: Option<i64> = r.get(5).map_err(sqlite)?;
            let held = holder.is_some_and(|h| expires.is_some_and(|e| e > now_ms) && !h.is_dead());
            if !held {
                due.push(id);
                if due.len() >= limit {
                    return Ok(due);
                }
            }
        }
    }
    Ok(due)
}

/// The `json` column of each value in `digests` (`None`: no row; `Some(None)`: kept in a
/// file), looked up with one prepared statement in one read transaction.
pub(crate) fn value_rows(
    conn: &Connection,
    digests: &[&str],
) -> Result<Vec<Option<Option<String>>>, StoreError> {
    // One read transaction for the lot: each statement on its own would take and drop the
    // database's shared lock (and look at the WAL's index) again. One lookup needs none.
    let _tx = match digests.len() {
        0 | 1 => None,
        _ => Some(conn.unchecked_transaction().map_err(sqlite)?),
    };
    let mut stmt = conn
        .prepare_cached("SELECT json FROM vals WHERE digest = ?1")
        .map_err(sqlite)?;
    digests
        .iter()
        .map(|d| stmt.query_row([d], |r| r.get(0)).optional())
        .collect::<rusqlite::Result<_>>()
        .map_err(sqlite)
}

/// A FlowSpec's JSON by digest.
pub(crate) fn spec(conn: &Connection, digest: &str) -> Result<Option<String>, StoreError> {
    conn.prepare_cached("SELECT json FROM specs WHERE digest = ?1")
        .and_then(|mut s| s.query_row([digest], |r| r.get(0)).optional())
        .map_err(sqlite)
}

/// Hands a FlowSpec's JSON to `read`; false when there is none.
pub(crate) fn read_spec(
    conn: &Connection,
    digest: &str,
    read: &mut dyn FnMut(&str),
) -> Result<bool, StoreError> {
    read_in_place(
        conn,
        "SELECT json FROM specs WHERE digest = ?1",
        params![digest],
        &mut |v| {
            read(v.as_str()?);
            Ok(())
        },
    )
}

/// Hands the binary form of this build's layout of the FlowSpec `digest` to `read`; false
/// when there is none.
pub(crate) fn read_spec_binary(
    conn: &Connection,
    digest: &str,
    read: &mut dyn FnMut(&[u8]),
) -> Result<bool, StoreError> {
    read_in_place(
        conn,
        "SELECT bytes FROM spec_binaries WHERE digest = ?1 AND layout = ?2",
        params![digest, reel_flowspec::BINARY_LAYOUT],
        &mut |v| {
            read(v.as_blob()?);
            Ok(())
        },
    )
}

/// Hands the first column of the row `sql` finds to `read` straight from SQLite's buffer: a
/// spec, as JSON or in its binary form, can be tens of MiB, and a copy would double the memory
/// its reading needs. False when there is no row.
fn read_in_place(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    read: &mut dyn FnMut(ValueRef<'_>) -> rusqlite::Result<()>,
) -> Result<bool, StoreError> {
    let mut stmt = conn.prepare_cached(sql).map_err(sqlite)?;
    let mut rows = stmt.query(params).map_err(sqlite)?;
    let Some(row) = rows.next().map_err(sqlite)? else {
        return Ok(false);
    };
    row.get_ref(0).and_then(&mut *read).map_err(sqlite)?;
    Ok(true)
}

/// Whether the store has the binary form of this build's layout for the FlowSpec `digest`.
pub(crate) fn has_spec_binary(conn: &Connection, digest: &str) -> Result<bool, StoreError> {
    conn.prepare_cached("SELECT 1 FROM spec_binaries WHERE digest = ?1 AND layout = ?2")
        .and_then(|mut s| s.exists(params![digest, reel_flowspec::BINARY_LAYOUT]))
        .map_err(sqlite)
}

/// The value a name stands for when the value is named by itself (`None` for a digest); a
/// name whose text is not canonical JSON (a journal edited by hand) is refused as corrupt, so it
/// is never taken for another value.
pub(crate) fn literal_value(name: &str) -> Option<Result<Value, StoreError>> {
    let text = reel_flowspec::canonical::literal(name)?;
    let corrupt = || StoreError::CorruptValue {
        digest: name.to_string(),
    };
    Some(
        serde_json::from_str::<Value>(text)
            .ok()
            .filter(|v| reel_flowspec::canonical::canonical_json(v) == text)
            .ok_or_else(corrupt),
    )
}

/// Parses stored JSON text as a value; text that does not parse makes the value missing.
pub fn parse_value(digest: &str, text: &str) -> Result<Value, StoreError> {
    // The text kept is the value's canonical JSON, so its hash is its digest; a value whose
    // bytes changed would be read back as another value, which a resume must never do.
    if reel_flowspec::canonical::sha256_hex(text.as_bytes()) != digest {
        return Err(StoreError::CorruptValue {
            digest: digest.to_string(),
        });
    }
    // A run builds values deeper than serde_json's fixed limit of 128 levels (a step that wraps
    // another's value, a tool's result around what it parsed): what was stored must read back,
    // so the limit is off and the stack grows as the reading needs.
    let mut de = serde_json::Deserializer::from_str(text);
    de.disable_recursion_limit();
    let value = Value::deserialize(serde_stacker::Deserializer::new(&mut de))
        .and_then(|value| de.end().map(|()| value));
    value.map_err(|_| StoreError::CorruptValue {
        digest: digest.to_string(),
    })
}
