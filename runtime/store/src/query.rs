//! `reel sql`: one statement that only reads, run on a connection that cannot write, with its
//! answer turned into JSON values the same way on both stores.

use std::path::Path;

use postgres::Client;
use postgres::types::Type;
use rusqlite::types::ValueRef;
use serde_json::Value;

use crate::api::{QueryAnswer, StoreError};
use crate::schema;

/// What a query of more than one statement is told, on either store.
const ONE_STATEMENT: &str = "give one statement: `reel sql` runs one query at a time";

/// Runs `sql` on a connection of its own to the SQLite database at `db`: opened read-only,
/// with `query_only` set (which covers any database it attaches, opened read-only as well), so
/// nothing it runs can write.
pub(crate) fn sqlite(db: &Path, sql: &str) -> Result<QueryAnswer, StoreError> {
    let conn = schema::open_reader(db)?;
    conn.pragma_update(None, "query_only", true)
        .map_err(|e| StoreError::Sqlite(e.to_string()))?;
    let mut stmt = conn.prepare(sql).map_err(|e| sqlite_error(&e))?;
    if !stmt.readonly() {
        return Err(StoreError::QueryWrites(first_word(sql)));
    }
    let columns: Vec<String> = stmt.column_names().map(String::from).collect();
    let width = columns.len();
    let mut rows = Vec::new();
    let mut cursor = stmt.query([]).map_err(|e| sqlite_error(&e))?;
    while let Some(row) = cursor.next().map_err(|e| sqlite_error(&e))? {
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
pub(crate) fn postgres(client: &mut Client, sql: &str) -> Result<QueryAnswer, StoreError> {
    let mut tx = client
        .build_transaction()
        .read_only(true)
        .start()
        .map_err(|e| pg_error(&e))?;
    let stmt = tx.prepare(sql).map_err(|e| pg_error(&e))?;
    let columns: Vec<String> = stmt
        .columns()
        .iter()
        .map(|c| c.name().to_string())
        .collect();
    let types: Vec<Type> = stmt.columns().iter().map(|c| c.type_().clone()).collect();
    let messages = tx.simple_query(sql).map_err(|e| pg_error(&e))?;
    let mut rows = Vec::new();
    for message in messages {
        if let postgres::SimpleQueryMessage::Row(row) = message {
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
