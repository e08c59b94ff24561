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

    /// Writes a run exactly as exported, in one transaction on a connection of its own; false
    /// (and nothing written) when the store already has a run with its id. Its values and
    /// FlowSpec must be stored first.
    pub fn import_run(&self, run: &RunExport) -> Result<bool, StoreError> {
        if self.is_read_only() {
            return Err(StoreError::ReadOnly);
        }
        let mut client = self.connector.connect()?;
        let mut tx = client.transaction().map_err(|e| pg(&e))?;
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
        for e in &run.events {
            tx.execute(
                "INSERT INTO journal (run, seq, at, kind, step, idx, attempt, data)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                &[
                    &r.id,
                    &int(e.seq),
                    &e.at,
                    &e.kind,
                    &e.step,
                    &e.index.map(i64::from),
                    &e.attempt.map(i64::from),
                    &e.data.to_string(),
                ],
            )
            .map_err(|e| pg(&e))?;
        }
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
        tx.commit().map_err(|e| pg(&e))?;
        Ok(true)
    }
}
