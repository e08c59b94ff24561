//! Moving whole runs in and out of the PostgreSQL store, for `reel store copy`.

use std::collections::{HashMap, HashSet};

use postgres::Client;

use super::PgStore;
use super::conn::pg;
use super::read::{
    PageRow, Prepared, RUN_COLUMNS, event_from, get, hand_missing, hand_rows, log_from, run_from,
    signal_from,
};
use crate::api::{Flow, JournalRow, RunExport, RunRow, StoreError};
use crate::writer::durability_str;

fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl PgStore {
    /// The first runs of `ids` that the store has, in that order, each with its journal,
    /// signals and logs, as many as hold at most `max_events` events between them (at least
    /// one run), and how many of `ids` that took (those not in the store among them): four
    /// statements for them all, where a run at a time cost four round trips a run. A journal
    /// is read up to the length its run's row gave (rows appended after are not missing
    /// ones); a journal with a hole cannot be exported (the copy would not be the run).
    pub fn export_runs(
        &self,
        ids: &[String],
        max_events: u64,
    ) -> Result<(Vec<RunExport>, usize), StoreError> {
        let ids = ids.to_vec();
        self.readers.with(move |c| export_runs(c, &ids, max_events))
    }

    /// A connection of its own that writes runs exactly as exported, opened once for a whole
    /// copy: opening one for each run cost more than writing the run.
    pub fn importer(&self) -> Result<PgImporter, StoreError> {
        if self.is_read_only() {
            return Err(StoreError::ReadOnly);
        }
        Ok(PgImporter {
            client: self.connector.connect()?,
        })
    }
}

/// [`PgStore::export_runs`] on a reader's connection.
fn export_runs(
    client: &mut Client,
    ids: &[String],
    max_events: u64,
) -> Result<(Vec<RunExport>, usize), StoreError> {
    let rows = client
        .query_prepared(
            &format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ANY($1)"),
            &[&ids],
        )
        .map_err(|e| pg(&e))?;
    let mut rows: HashMap<String, RunRow> = rows
        .iter()
        .map(|r| run_from(r).map(|row| (row.id.clone(), row)))
        .collect::<Result<_, _>>()?;
    // The first runs, in order, within the budget of events.
    let (mut order, mut events, mut taken) = (Vec::new(), 0u64, ids.len());
    for (at, id) in ids.iter().enumerate() {
        let Some(length) = rows.get(id).map(|r| r.next_seq) else {
            continue;
        };
        if !order.is_empty() && events.saturating_add(length) > max_events {
            taken = at;
            break;
        }
        events = events.saturating_add(length);
        order.push(id.clone());
    }
    let mut runs: HashMap<String, RunExport> = HashMap::with_capacity(order.len());
    for id in &order {
        if let Some(row) = rows.remove(id) {
            let export = RunExport {
                row,
                events: Vec::new(),
                signals: Vec::new(),
                logs: Vec::new(),
            };
            runs.insert(id.clone(), export);
        }
    }
    let (found, lengths): (Vec<String>, Vec<i64>) = runs
        .values()
        .map(|r| (r.row.id.clone(), int(r.row.next_seq)))
        .unzip();
    let journal = client
        .query_prepared(
            "SELECT j.seq, j.at, j.kind, j.step, j.idx, j.attempt, j.data, j.run
             FROM unnest($1::text[], $2::bigint[]) AS w(run, length)
             JOIN journal j ON j.run = w.run AND j.seq < w.length
             ORDER BY j.run, j.seq",
            &[&found, &lengths],
        )
        .map_err(|e| pg(&e))?;
    let mut pages: HashMap<String, Vec<PageRow>> = HashMap::new();
    for row in &journal {
        let (seq, run): (i64, String) = (get(row, 0)?, get(row, 7)?);
        let event = event_from(row, 0, &run, seq);
        pages.entry(run).or_default().push((seq, event));
    }
    for id in &order {
        let Some(run) = runs.get_mut(id) else {
            continue;
        };
        let mut hole = None;
        let mut expected = 0;
        let mut take = |row: JournalRow| match row {
            JournalRow::Event(event) => {
                run.events.push(event);
                Flow::Continue
            }
            JournalRow::Hole { seq, message } => {
                hole = Some((seq, message));
                Flow::Stop
            }
        };
        if let Flow::Continue = hand_rows(
            pages.remove(id).unwrap_or_default(),
            &mut expected,
            &mut take,
        ) {
            hand_missing(&mut expected, run.row.next_seq, &mut take);
        }
        if let Some((seq, message)) = hole {
            return Err(StoreError::Hole {
                run: id.clone(),
                seq,
                message,
            });
        }
    }
    let signals = client
        .query_prepared(
            "SELECT run, seq, name, payload_digest, sent_at, consumed_by FROM signals
             WHERE run = ANY($1) ORDER BY run, seq",
            &[&found],
        )
        .map_err(|e| pg(&e))?;
    for row in &signals {
        let signal = signal_from(row)?;
        if let Some(run) = runs.get_mut(&signal.run) {
            run.signals.push(signal);
        }
    }
    let logs = client
        .query_prepared(
            "SELECT run, step, idx, attempt, at, text FROM logs
             WHERE run = ANY($1) ORDER BY run, id",
            &[&found],
        )
        .map_err(|e| pg(&e))?;
    for row in &logs {
        let log = log_from(row)?;
        if let Some(run) = runs.get_mut(&log.run) {
            run.logs.push(log);
        }
    }
    let exported = order.iter().filter_map(|id| runs.remove(id)).collect();
    Ok((exported, taken))
}

/// Writes whole runs into a PostgreSQL store, for `reel store copy` ([`PgStore::importer`]).
pub struct PgImporter {
    client: postgres::Client,
}

impl PgImporter {
    /// Which of `ids` the store has runs of (one statement).
    pub fn existing(&mut self, ids: &[String]) -> Result<HashSet<String>, StoreError> {
        let rows = self
            .client
            .query("SELECT id FROM runs WHERE id = ANY($1)", &[&ids])
            .map_err(|e| pg(&e))?;
        rows.iter().map(|r| get(r, 0)).collect()
    }

    /// Writes runs exactly as exported, all in one transaction (a commit for many runs, not
    /// one each) and four statements (their rows, journals, signals and logs, each table's
    /// rows in one); for each, false (and nothing written) when the store already has a run
    /// with its id. Their values and FlowSpecs must be stored first.
    pub fn import_runs(&mut self, runs: &[RunExport]) -> Result<Vec<bool>, StoreError> {
        let mut tx = self.client.transaction().map_err(|e| pg(&e))?;
        let inserted = insert_rows(&mut tx, runs)?;
        let new: Vec<&RunExport> = runs
            .iter()
            .filter(|r| inserted.contains(&r.row.id))
            .collect();
        insert_journals(&mut tx, &new)?;
        insert_signals(&mut tx, &new)?;
        insert_logs(&mut tx, &new)?;
        tx.commit().map_err(|e| pg(&e))?;
        Ok(runs.iter().map(|r| inserted.contains(&r.row.id)).collect())
    }
}

/// Inserts the runs' rows exactly as exported, in one statement; the ids inserted (a run whose
/// id the store has is left as it is).
fn insert_rows(
    tx: &mut postgres::Transaction<'_>,
    runs: &[RunExport],
) -> Result<HashSet<String>, StoreError> {
    let rows: Vec<&RunRow> = runs.iter().map(|r| &r.row).collect();
    // One column of the rows, as the array its `unnest` parameter takes.
    fn column<T>(rows: &[&RunRow], f: impl Fn(&RunRow) -> T) -> Vec<T> {
        rows.iter().map(|r| f(r)).collect()
    }
    let owner = |r: &RunRow| r.lease_owner.clone();
    let inserted = tx
        .query(
            "INSERT INTO runs (id, flow, flow_digest, source, source_abs, cwd,
                parent, status, created_at, ended_at, due_at, waiting_on, signal_pending,
                lease_owner, lease_pid, lease_host, lease_started, lease_expires_at,
                lease_token, cancel_requested, output_digest, error, keep_for_ms,
                durability, next_seq)
             SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
                $6::text[], $7::text[], $8::text[], $9::bigint[], $10::bigint[], $11::bigint[],
                $12::text[], $13::boolean[], $14::text[], $15::bigint[], $16::text[],
                $17::bigint[], $18::bigint[], $19::bigint[], $20::boolean[], $21::text[],
                $22::text[], $23::bigint[], $24::text[], $25::bigint[])
             ON CONFLICT (id) DO NOTHING
             RETURNING id",
            &[
                &column(&rows, |r| r.id.clone()),
                &column(&rows, |r| r.flow.clone()),
                &column(&rows, |r| r.flow_digest.clone()),
                &column(&rows, |r| r.source.clone()),
                &column(&rows, |r| r.source_abs.clone()),
                &column(&rows, |r| r.cwd.clone()),
                &column(&rows, |r| r.parent.clone()),
                &column(&rows, |r| r.status.as_str().to_string()),
                &column(&rows, |r| r.created_at),
                &column(&rows, |r| r.ended_at),
                &column(&rows, |r| r.due_at),
                &column(&rows, |r| {
                    serde_json::to_string(&r.waiting_on).unwrap_or_else(|_| "[]".into())
                }),
                &column(&rows, |r| r.signal_pending),
                &column(&rows, |r| owner(r).map(|o| o.id)),
                &column(&rows, |r| owner(r).map(|o| i64::from(o.pid))),
                &column(&rows, |r| owner(r).map(|o| o.host)),
                &column(&rows, |r| owner(r).map(|o| int(o.started))),
                &column(&rows, |r| r.lease_expires_at),
                &column(&rows, |r| int(r.lease_token)),
                &column(&rows, |r| r.cancel_requested),
                &column(&rows, |r| r.output_digest.clone()),
                &column(&rows, |r| r.error.as_ref().map(|e| e.to_string())),
                &column(&rows, |r| r.keep_for_ms.map(int)),
                &column(&rows, |r| durability_str(r.durability).to_string()),
                &column(&rows, |r| int(r.next_seq)),
            ],
        )
        .map_err(|e| pg(&e))?;
    inserted.iter().map(|r| get(r, 0)).collect()
}

/// Inserts the runs' journals, in one statement.
fn insert_journals(
    tx: &mut postgres::Transaction<'_>,
    runs: &[&RunExport],
) -> Result<(), StoreError> {
    let events: Vec<_> = runs.iter().flat_map(|r| &r.events).collect();
    if events.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = events.iter().map(|e| e.run.as_str()).collect();
    let seqs: Vec<i64> = events.iter().map(|e| int(e.seq)).collect();
    let ats: Vec<i64> = events.iter().map(|e| e.at).collect();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    let steps: Vec<Option<&str>> = events.iter().map(|e| e.step.as_deref()).collect();
    let idxs: Vec<Option<i64>> = events.iter().map(|e| e.index.map(i64::from)).collect();
    let attempts: Vec<Option<i64>> = events.iter().map(|e| e.attempt.map(i64::from)).collect();
    let datas: Vec<String> = events.iter().map(|e| e.data.to_string()).collect();
    tx.execute(
        "INSERT INTO journal (run, seq, at, kind, step, idx, attempt, data)
         SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::text[],
            $6::bigint[], $7::bigint[], $8::text[])",
        &[&ids, &seqs, &ats, &kinds, &steps, &idxs, &attempts, &datas],
    )
    .map_err(|e| pg(&e))?;
    Ok(())
}

/// Inserts every signal of the runs, consumed or not, in one statement.
fn insert_signals(
    tx: &mut postgres::Transaction<'_>,
    runs: &[&RunExport],
) -> Result<(), StoreError> {
    let signals: Vec<_> = runs.iter().flat_map(|r| &r.signals).collect();
    if signals.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = signals.iter().map(|s| s.run.as_str()).collect();
    let seqs: Vec<i64> = signals.iter().map(|s| int(s.seq)).collect();
    let names: Vec<&str> = signals.iter().map(|s| s.name.as_str()).collect();
    let payloads: Vec<&str> = signals.iter().map(|s| s.payload_digest.as_str()).collect();
    let sent: Vec<i64> = signals.iter().map(|s| s.sent_at).collect();
    let consumed: Vec<Option<i64>> = signals.iter().map(|s| s.consumed_by.map(int)).collect();
    tx.execute(
        "INSERT INTO signals (run, seq, name, payload_digest, sent_at, consumed_by)
         SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::bigint[],
            $6::bigint[])",
        &[&ids, &seqs, &names, &payloads, &sent, &consumed],
    )
    .map_err(|e| pg(&e))?;
    Ok(())
}

/// Inserts the runs' log lines in one statement, in their order (which their ids keep).
fn insert_logs(tx: &mut postgres::Transaction<'_>, runs: &[&RunExport]) -> Result<(), StoreError> {
    let logs: Vec<_> = runs.iter().flat_map(|r| &r.logs).collect();
    if logs.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = logs.iter().map(|l| l.run.as_str()).collect();
    let steps: Vec<&str> = logs.iter().map(|l| l.step.as_str()).collect();
    let idxs: Vec<Option<i64>> = logs.iter().map(|l| l.index.map(i64::from)).collect();
    let attempts: Vec<i64> = logs.iter().map(|l| i64::from(l.attempt)).collect();
    let ats: Vec<i64> = logs.iter().map(|l| l.at).collect();
    let texts: Vec<&str> = logs.iter().map(|l| l.text.as_str()).collect();
    tx.execute(
        "INSERT INTO logs (run, step, idx, attempt, at, text)
         SELECT run, step, idx, attempt, at, text
         FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[],
            $6::text[]) WITH ORDINALITY AS l(run, step, idx, attempt, at, text, n)
         ORDER BY n",
        &[&ids, &steps, &idxs, &attempts, &ats, &texts],
    )
    .map_err(|e| pg(&e))?;
    Ok(())
}
