//! Moving whole runs in and out of the PostgreSQL store, for `reel store copy`.

use super::PgStore;
use super::conn::pg;
use crate::api::{RunExport, SignalRow, StoreError};
use crate::writer::durability_str;

fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl PgStore {
    /// Every signal of a run, consumed or not, in order.
    pub fn all_signals(&self, run: &str) -> Result<Vec<SignalRow>, StoreError> {
        let run = run.to_string();
        self.readers.with(move |c| {
            let rows = c
                .query(
                    "SELECT run, seq, name, payload_digest, sent_at, consumed_by FROM signals
                     WHERE run = $1 ORDER BY seq",
                    &[&run],
                )
                .map_err(|e| pg(&e))?;
            Ok(rows
                .iter()
                .map(|r| SignalRow {
                    run: r.get(0),
                    seq: u64::try_from(r.get::<_, i64>(1)).unwrap_or(0),
                    name: r.get(2),
                    payload_digest: r.get(3),
                    sent_at: r.get(4),
                    consumed_by: r
                        .get::<_, Option<i64>>(5)
                        .map(|n| u64::try_from(n).unwrap_or(0)),
                })
                .collect())
        })
    }

    /// A run with its journal, signals and logs; `None` when there is no such run.
    pub fn export_run(&self, id: &str) -> Result<Option<RunExport>, StoreError> {
        crate::copy::export_run(self, id, |run| self.all_signals(run))
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

/// Writes whole runs into a PostgreSQL store, for `reel store copy` ([`PgStore::importer`]).
pub struct PgImporter {
    client: postgres::Client,
}

impl PgImporter {
    /// Writes runs exactly as exported, all in one transaction (a commit for many runs, not
    /// one each); for each, false (and nothing written) when the store already has a run with
    /// its id. Their values and FlowSpecs must be stored first.
    pub fn import_runs(&mut self, runs: &[RunExport]) -> Result<Vec<bool>, StoreError> {
        let mut tx = self.client.transaction().map_err(|e| pg(&e))?;
        let written = runs
            .iter()
            .map(|run| import_run(&mut tx, run))
            .collect::<Result<Vec<bool>, StoreError>>()?;
        tx.commit().map_err(|e| pg(&e))?;
        Ok(written)
    }
}

/// Writes one run exactly as exported in `tx`; false when the store already has its id. Its
/// journal goes in one statement.
fn import_run(tx: &mut postgres::Transaction<'_>, run: &RunExport) -> Result<bool, StoreError> {
    let r = &run.row;
    let owner = r.lease_owner.as_ref();
    let inserted = tx
        .execute(
            "INSERT INTO runs (id, flow, flow_digest, source, source_abs, cwd,
                parent, status, created_at, ended_at, due_at, waiting_on, signal_pending,
                lease_owner, lease_pid, lease_host, lease_started, lease_expires_at,
                lease_token, cancel_requested, output_digest, error, keep_for_ms,
                durability, next_seq)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
                $17, $18, $19, $20, $21, $22, $23, $24, $25)
             ON CONFLICT (id) DO NOTHING",
            &[
                &r.id,
                &r.flow,
                &r.flow_digest,
                &r.source,
                &r.source_abs,
                &r.cwd,
                &r.parent,
                &r.status.as_str(),
                &r.created_at,
                &r.ended_at,
                &r.due_at,
                &serde_json::to_string(&r.waiting_on).unwrap_or_else(|_| "[]".into()),
                &r.signal_pending,
                &owner.map(|o| o.id.clone()),
                &owner.map(|o| i64::from(o.pid)),
                &owner.map(|o| o.host.clone()),
                &owner.map(|o| int(o.started)),
                &r.lease_expires_at,
                &int(r.lease_token),
                &r.cancel_requested,
                &r.output_digest,
                &r.error.as_ref().map(|e| e.to_string()),
                &r.keep_for_ms.map(int),
                &durability_str(r.durability),
                &int(r.next_seq),
            ],
        )
        .map_err(|e| pg(&e))?;
    if inserted == 0 {
        return Ok(false);
    }
    let seqs: Vec<i64> = run.events.iter().map(|e| int(e.seq)).collect();
    let ats: Vec<i64> = run.events.iter().map(|e| e.at).collect();
    let kinds: Vec<&str> = run.events.iter().map(|e| e.kind.as_str()).collect();
    let steps: Vec<Option<&str>> = run.events.iter().map(|e| e.step.as_deref()).collect();
    let idxs: Vec<Option<i64>> = run.events.iter().map(|e| e.index.map(i64::from)).collect();
    let attempts: Vec<Option<i64>> = run
        .events
        .iter()
        .map(|e| e.attempt.map(i64::from))
        .collect();
    let datas: Vec<String> = run.events.iter().map(|e| e.data.to_string()).collect();
    tx.execute(
        "INSERT INTO journal (run, seq, at, kind, step, idx, attempt, data)
         SELECT $1, * FROM unnest($2::bigint[], $3::bigint[], $4::text[], $5::text[],
            $6::bigint[], $7::bigint[], $8::text[])",
        &[&r.id, &seqs, &ats, &kinds, &steps, &idxs, &attempts, &datas],
    )
    .map_err(|e| pg(&e))?;
    for s in &run.signals {
        tx.execute(
            "INSERT INTO signals (run, seq, name, payload_digest, sent_at, consumed_by)
             VALUES ($1, $2, $3, $4, $5, $6)",
            &[
                &r.id,
                &int(s.seq),
                &s.name,
                &s.payload_digest,
                &s.sent_at,
                &s.consumed_by.map(int),
            ],
        )
        .map_err(|e| pg(&e))?;
    }
    for l in &run.logs {
        tx.execute(
            "INSERT INTO logs (run, step, idx, attempt, at, text)
             VALUES ($1, $2, $3, $4, $5, $6)",
            &[
                &r.id,
                &l.step,
                &l.index.map(i64::from),
                &i64::from(l.attempt),
                &l.at,
                &l.text,
            ],
        )
        .map_err(|e| pg(&e))?;
    }
    Ok(true)
}
