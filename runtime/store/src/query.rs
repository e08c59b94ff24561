//! `reel sql`: one statement that only reads, run on a connection that cannot write, with its
//! answer turned into JSON values the same way on both stores, and stopped at its limits.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use postgres::Client;
use postgres::types::Type;
use rusqlite::types::ValueRef;
use serde_json::Value;

use crate::api::{QueryAnswer, QueryLimits, StoreError};
use crate::schema;

/// What a query of more than one statement is told, on either store.
const ONE_STATEMENT: &str = "give one statement: `reel sql` runs one query at a time";

/// How many rows one `FETCH` brings from PostgreSQL: what this process holds of a query's
/// answer beyond the rows it keeps is at most this many.
const PG_ROWS_PER_FETCH: usize = 1_000;

/// How often (ms) the PostgreSQL server looks whether the process that asked is still there
/// while the query runs: a `reel sql` stopped with Ctrl-C or killed leaves no query running on
/// a server others share (`client_connection_check_interval`, PostgreSQL 14 and later).
const PG_CLIENT_CHECK_MS: u64 = 1_000;

/// The error of a query that answered more rows than it may, once a row past the limit came.
fn check_rows(rows: usize, limits: QueryLimits) -> Result<(), StoreError> {
    match limits.max_rows {
        Some(max) if rows > max => Err(StoreError::QueryRows { max }),
        _ => Ok(()),
    }
}

/// The error of a query stopped at its time limit.
fn timed_out(limit: Duration) -> StoreError {
    let ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX);
    StoreError::QueryTimeout {
        limit: reel_flowspec::Duration(ms).to_string(),
    }
}

/// Runs `sql` on a connection of its own to the SQLite database at `db`: opened read-only,
/// with `query_only` set (which covers any database it attaches, opened read-only as well), so
/// nothing it runs can write. A watchdog thread interrupts the query past `limits.timeout`
/// (the store reads no clock: the thread sleeps the limit out); rows past `limits.max_rows`
/// are not read.
pub(crate) fn sqlite(db: &Path, sql: &str, limits: QueryLimits) -> Result<QueryAnswer, StoreError> {
    let conn = schema::open_reader(db)?;
    conn.pragma_update(None, "query_only", true)
        .map_err(|e| StoreError::Sqlite(e.to_string()))?;
    // Dropped when this function returns, which tells the watchdog the query is over.
    let (_over, watched) = mpsc::channel::<()>();
    if let Some(limit) = limits.timeout {
        let interrupt = conn.get_interrupt_handle();
        std::thread::Builder::new()
            .name("reel-sql-watchdog".into())
            .spawn(move || {
                if let Err(mpsc::RecvTimeoutError::Timeout) = watched.recv_timeout(limit) {
                    interrupt.interrupt();
                }
            })
            .map_err(|e| StoreError::Sqlite(format!("cannot start the query's watchdog: {e}")))?;
    }
    let sqlite_error = |e: &rusqlite::Error| match limits.timeout {
        Some(limit) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::OperationInterrupted) => {
            timed_out(limit)
        }
        _ => sqlite_error(e),
    };
    let mut stmt = conn.prepare(sql).map_err(|e| sqlite_error(&e))?;
    if !stmt.readonly() {
        return Err(StoreError::QueryWrites(first_word(sql)));
    }
    let columns: Vec<String> = stmt.column_names().map(String::from).collect();
    let width = columns.len();
    let mut rows = Vec::new();
    let mut cursor = stmt.query([]).map_err(|e| sqlite_error(&e))?;
    while let Some(row) = cursor.next().map_err(|e| sqlite_error(&e))? {
        check_rows(rows.len() + 1, limits)?;
        let mut values = Vec::with_capacity(width);
        for i in 0..width {
            let value = row.get_ref(i).map_err(|e| sqlite_error(&e))?;
            values.push(match value {
                ValueRef::Null => Value::Null,
                ValueRef::Integer(n) => Value::from(n),
                ValueRef::Real(x) => Value::from(x),
                ValueRef::Text(t) => Value::from(String::from_utf8_lossy(t).into_owned()),
                ValueRef::Blob(b) => Value::from(hex(b)),
            });
        }
        rows.push(values);
    }
    Ok(QueryAnswer { columns, rows })
}

/// SQLite's message for a statement it refused, a write the read-only connection stopped
/// included.
fn sqlite_error(e: &rusqlite::Error) -> StoreError {
    if matches!(e, rusqlite::Error::MultipleStatement) {
        return StoreError::Query(ONE_STATEMENT.to_string());
    }
    let message = e.to_string();
    if message.contains("readonly database") || message.contains("query_only") {
        return StoreError::QueryWrites(message);
    }
    StoreError::Query(message)
}

/// Runs `sql` on `client` inside a read-only transaction that is rolled back afterwards, so
/// even a `SET` it makes does not outlive it. The statement is prepared first, which refuses
/// more than one statement and tells the columns' types; it then runs in the simple protocol,
/// which hands every value over as text whatever its type, and the types turn numbers and
/// booleans back into JSON numbers and booleans.
///
/// The limits are the server's to keep where it can: `statement_timeout` stops the query past
/// `limits.timeout` whether or not this process is still there to ask, and the server looks
/// every second whether it is (so a killed `reel sql` leaves nothing running). The answer is
/// read through a cursor a thousand rows at a time, so that one past `limits.max_rows` ends
/// the query without the rest being sent; a statement that cannot be a cursor's (`EXPLAIN`,
/// `SHOW`, whose answers are short) is read whole.
pub(crate) fn postgres(
    client: &mut Client,
    sql: &str,
    limits: QueryLimits,
) -> Result<QueryAnswer, StoreError> {
    // edge: whether a canceled query had run its time out is I/O timing, not a decision of
    // the engine; it reads the monotonic clock.
    #[allow(clippy::disallowed_methods)]
    let began = std::time::Instant::now();
    // The server cancels a statement past `statement_timeout`, which the transaction sets
    // for each statement, so a cancel of ours comes at least the limit after the start. One
    // sooner is somebody else's (an administrator's `pg_cancel_backend`, a server shutting
    // down), which the server's own words tell.
    let pg_error = |e: &postgres::Error| match limits.timeout {
        Some(limit)
            if e.code() == Some(&postgres::error::SqlState::QUERY_CANCELED)
                && began.elapsed() >= limit =>
        {
            timed_out(limit)
        }
        _ => pg_error(e),
    };
    let mut tx = client
        .build_transaction()
        .read_only(true)
        .start()
        .map_err(|e| pg_error(&e))?;
    // The limits and the savepoint a statement no cursor can hold goes back to, in one round
    // trip; numbers of ours only, nothing of the user's.
    let mut setup = String::new();
    if let Some(limit) = limits.timeout {
        // The server takes at most i32::MAX ms (24.8 days), and 0 would mean no limit.
        let ms = limit.as_millis().clamp(1, i32::MAX as u128);
        setup.push_str(&format!(
            "SELECT set_config('statement_timeout', '{ms}', true); "
        ));
    }
    setup.push_str(&format!(
        "SELECT CASE WHEN current_setting('server_version_num')::int >= 140000 \
         THEN set_config('client_connection_check_interval', '{PG_CLIENT_CHECK_MS}', true) END; \
         SAVEPOINT reel_sql"
    ));
    tx.batch_execute(&setup).map_err(|e| pg_error(&e))?;
    let stmt = tx.prepare(sql).map_err(|e| pg_error(&e))?;
    let columns: Vec<String> = stmt
        .columns()
        .iter()
        .map(|c| c.name().to_string())
        .collect();
    let types: Vec<Type> = stmt.columns().iter().map(|c| c.type_().clone()).collect();
    let mut rows = Vec::new();
    let mut take = |messages: Vec<postgres::SimpleQueryMessage>| -> Result<usize, StoreError> {
        let mut taken = 0;
        for message in messages {
            if let postgres::SimpleQueryMessage::Row(row) = message {
                taken += 1;
                check_rows(rows.len() + 1, limits)?;
                let mut values = Vec::with_capacity(types.len());
                for (i, ty) in types.iter().enumerate() {
                    values.push(match row.get(i) {
                        None => Value::Null,
                        Some(text) => pg_value(ty, text),
                    });
                }
                rows.push(values);
            }
        }
        Ok(taken)
    };
    // The user's text comes last, so that a comment ending it comments out nothing of ours.
    let declared = tx.batch_execute(&format!("DECLARE reel_sql NO SCROLL CURSOR FOR {sql}"));
    match declared {
        Ok(()) => loop {
            let fetch = format!("FETCH FORWARD {PG_ROWS_PER_FETCH} FROM reel_sql");
            let messages = tx.simple_query(&fetch).map_err(|e| pg_error(&e))?;
            if take(messages)? < PG_ROWS_PER_FETCH {
                break;
            }
        },
        Err(e) if e.code() == Some(&postgres::error::SqlState::SYNTAX_ERROR) => {
            tx.batch_execute("ROLLBACK TO SAVEPOINT reel_sql")
                .map_err(|e| pg_error(&e))?;
            take(tx.simple_query(sql).map_err(|e| pg_error(&e))?)?;
        }
        Err(e) => return Err(pg_error(&e)),
    }
    tx.rollback().map_err(|e| pg_error(&e))?;
    Ok(QueryAnswer { columns, rows })
}

/// A PostgreSQL value given as text, as JSON: integers and floats as numbers, booleans as
/// booleans, everything else (JSON columns included) as its text, as SQLite gives it.
fn pg_value(ty: &Type, text: &str) -> Value {
    let number = |v: Option<Value>| v.unwrap_or_else(|| Value::from(text));
    match *ty {
        Type::INT2 | Type::INT4 | Type::INT8 | Type::OID => {
            number(text.parse::<i64>().ok().map(Value::from))
        }
        Type::FLOAT4 | Type::FLOAT8 | Type::NUMERIC => number(
            text.parse::<i64>()
                .ok()
                .map(Value::from)
                .or_else(|| text.parse::<f64>().ok().map(Value::from)),
        ),
        Type::BOOL => Value::Bool(text == "t"),
        _ => Value::from(text),
    }
}

/// PostgreSQL's message for a statement it refused; a write refused by the read-only
/// transaction (SQLSTATE 25006) is told apart.
fn pg_error(e: &postgres::Error) -> StoreError {
    let message = crate::pg::describe(e);
    if message.contains("multiple commands") {
        return StoreError::Query(ONE_STATEMENT.to_string());
    }
    match e.code() {
        Some(code) if *code == postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION => {
            StoreError::QueryWrites(message)
        }
        _ => StoreError::Query(message),
    }
}

/// The statement's first word (`INSERT`, …), to name what was refused.
fn first_word(sql: &str) -> String {
    let word: String = sql
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect();
    format!("{} statement", word.to_ascii_uppercase())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
