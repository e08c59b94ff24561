//! Moving whole runs in and out of the SQLite store, for `reel store copy`.

use std::collections::HashSet;

use rusqlite::params;

use super::SqliteStore;
use crate::api::{EventRow, Flow, RunExport, RunRow, SignalRow, StoreError, StoreRead};
use crate::schema;
use crate::writer::{durability_str, int, sqlite};

impl SqliteStore {
    /// Every signal of a run, consumed or not, in order.
    fn all_signals(&self, run: &str) -> Result<Vec<SignalRow>, StoreError> {
        self.readers.with(|c| {
            let mut stmt = c
                .prepare_cached(
                    "SELECT run, seq, name, payload_digest, sent_at, consumed_by FROM signals
                     WHERE run = ?1 ORDER BY seq",
                )
                .map_err(sqlite)?;
            stmt.query_map([run], |r| {
                Ok(SignalRow {
                    run: r.get(0)?,
                    seq: r.get::<_, i64>(1)?.try_into().unwrap_or(0),
                    name: r.get(2)?,
                    payload_digest: r.get(3)?,
                    sent_at: r.get(4)?,
                    consumed_by: r
                        .get::<_, Option<i64>>(5)?
                        .map(|n| n.try_into().unwrap_or(0)),
                })
            })
            .and_then(|rows| rows.collect())
            .map_err(sqlite)
        })
    }

    /// The first runs of `ids` that the store has, in that order, each with its journal,
    /// signals and logs, as many as hold at most `max_events` events between them (at least
    /// one run), and how many of `ids` that took (those not in the store among them). A run at
    /// a time: each read is a call into SQLite, not a round trip. A journal with a hole cannot
    /// be exported (the copy would not be the run).
    pub fn export_runs(
        &self,
        ids: &[String],
        max_events: u64,
    ) -> Result<(Vec<RunExport>, usize), StoreError> {
        let mut runs = Vec::new();
        let mut events = 0u64;
        for (taken, id) in ids.iter().enumerate() {
            let Some(row) = self.run(id)? else {
                continue;
            };
            if !runs.is_empty() && events.saturating_add(row.next_seq) > max_events {
                return Ok((runs, taken));
            }
            events = events.saturating_add(row.next_seq);
            runs.push(self.export_run(row)?);
        }
        Ok((runs, ids.len()))
    }

    /// The run of `row` with its journal, signals and logs.
    fn export_run(&self, row: RunRow) -> Result<RunExport, StoreError> {
        let mut events: Vec<EventRow> = Vec::new();
        self.read_journal(&row.id, 0, &mut |e| {
            events.push(e);
            Flow::Continue
        })?;
        Ok(RunExport {
            logs: self.logs(&row.id)?,
            signals: self.all_signals(&row.id)?,
            events,
            row,
        })
    }

    /// A connection of its own that writes runs exactly as exported, opened once for a whole
    /// copy: opening one for each run cost more than writing the run.
    pub fn importer(&self) -> Result<SqliteImporter, StoreError> {
        if self.is_read_only() {
            return Err(StoreError::ReadOnly);
        }
        Ok(SqliteImporter {
            conn: schema::open_writer(&self.dir.join("reel.db"))?,
        })
    }
}

/// Writes whole runs into a SQLite store, for `reel store copy` ([`SqliteStore::importer`]).
pub struct SqliteImporter {
    conn: rusqlite::Connection,
}

impl SqliteImporter {
    /// Which of `ids` the store has runs of.
    pub fn existing(&mut self, ids: &[String]) -> Result<HashSet<String>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT 1 FROM runs WHERE id = ?1")
            .map_err(sqlite)?;
        let mut found = HashSet::new();
        for id in ids {
            if stmt.exists([id]).map_err(sqlite)? {
                found.insert(id.clone());
            }
        }
        Ok(found)
    }

    /// Writes runs exactly as exported, all in one transaction (a commit for many runs, not
    /// one each); for each, false (and nothing written) when the store already has a run with
    /// its id. Their values and FlowSpecs must be stored first.
    pub fn import_runs(&mut self, runs: &[RunExport]) -> Result<Vec<bool>, StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(sqlite)?;
        let written = runs
            .iter()
            .map(|run| import_run(&tx, run))
            .collect::<Result<Vec<bool>, StoreError>>()?;
        tx.commit().map_err(sqlite)?;
        Ok(written)
    }
}

/// Writes one run exactly as exported in `tx`; false when the store already has its id.
fn import_run(tx: &rusqlite::Transaction<'_>, run: &RunExport) -> Result<bool, StoreError> {
    let r = &run.row;
    let owner = r.lease_owner.as_ref();
    let inserted = tx
        .execute(
            "INSERT OR IGNORE INTO runs (id, flow, flow_digest, source, source_abs, cwd,
                parent, status, created_at, ended_at, due_at, waiting_on, signal_pending,
                lease_owner, lease_pid, lease_host, lease_started, lease_expires_at,
                lease_token, cancel_requested, output_digest, error, keep_for_ms,
                durability, next_seq)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16,
                ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25)",
            params![
                r.id,
                r.flow,
                r.flow_digest,
                r.source,
                r.source_abs,
                r.cwd,
                r.parent,
                r.status.as_str(),
                r.created_at,
                r.ended_at,
                r.due_at,
                serde_json::to_string(&r.waiting_on).unwrap_or_else(|_| "[]".into()),
                r.signal_pending,
                owner.map(|o| o.id.clone()),
                owner.map(|o| o.pid),
                owner.map(|o| o.host.clone()),
                owner.map(|o| int(o.started)).transpose()?,
                r.lease_expires_at,
                int(r.lease_token)?,
                r.cancel_requested,
                r.output_digest,
                r.error.as_ref().map(|e| e.to_string()),
                r.keep_for_ms.map(int).transpose()?,
                durability_str(r.durability),
                int(r.next_seq)?,
            ],
        )
        .map_err(sqlite)?;
    if inserted == 0 {
        return Ok(false);
    }
    for e in &run.events {
        tx.execute(
            "INSERT INTO journal (run, seq, at, kind, step, idx, attempt, data)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                r.id,
                int(e.seq)?,
                e.at,
                e.kind,
                e.step,
                e.index,
                e.attempt,
                e.data.to_string()
            ],
        )
        .map_err(sqlite)?;
    }
    for s in &run.signals {
        tx.execute(
            "INSERT INTO signals (run, seq, name, payload_digest, sent_at, consumed_by)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                r.id,
                int(s.seq)?,
                s.name,
                s.payload_digest,
                s.sent_at,
                s.consumed_by.map(int).transpose()?
            ],
        )
        .map_err(sqlite)?;
    }
    for l in &run.logs {
        tx.execute(
            "INSERT INTO logs (run, step, idx, attempt, at, text)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![r.id, l.step, l.index, l.attempt, l.at, l.text],
        )
        .map_err(sqlite)?;
    }
    Ok(true)
}
