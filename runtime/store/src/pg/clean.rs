//! A clean on PostgreSQL: the same rule as the SQLite store's (see `writer::clean`): ended runs
//! go with their rows, and the values and FlowSpecs no remaining run references. Every value
//! lives in the database, so there are no files to remove after the commit.

use std::collections::HashSet;

use super::writer::{Batch, Fail};
use crate::api::{CleanScope, Cleaned, DEFAULT_KEEP_FOR_MS, RunStatus, StoreError};
use crate::writer::{VALUES_REMOVED, digests_in};

/// The statuses of ended runs, as stored: the only runs a clean may remove.
const ENDED: &str = "status IN ('succeeded', 'failed', 'canceled')";

fn pg(e: postgres::Error) -> StoreError {
    super::conn::pg(&e)
}

impl Batch<'_, '_> {
    /// The clean command: plans, and unless `dry_run`, removes.
    pub(super) fn clean(&mut self, scope: &CleanScope, dry_run: bool) -> Result<Cleaned, Fail> {
        let runs = self.runs_to_clean(scope)?;
        let (cleaned, values, specs) = self.plan(runs)?;
        if !dry_run && !cleaned.runs.is_empty() {
            self.remove(&cleaned.runs, &values, &specs)
                .map_err(|e| Fail::Batch(e.into()))?;
        }
        Ok(cleaned)
    }

    fn runs_to_clean(&mut self, scope: &CleanScope) -> Result<Vec<String>, StoreError> {
        match scope {
            CleanScope::Run(id) => {
                let status: Option<String> = self
                    .tx
                    .query_opt("SELECT status FROM runs WHERE id = $1", &[id])
                    .map_err(pg)?
                    .map(|r| r.get(0));
                match status {
                    None => Err(StoreError::NotFound(id.clone())),
                    Some(s) if RunStatus::parse(&s).is_some_and(RunStatus::is_ended) => {
                        Ok(vec![id.clone()])
                    }
                    Some(status) => Err(StoreError::NotEnded {
                        run: id.clone(),
                        status,
                    }),
                }
            }
            CleanScope::AllEnded => self.ids(
                &format!("SELECT id FROM runs WHERE {ENDED} ORDER BY id"),
                &[],
            ),
            CleanScope::Expired => {
                let now = self.clock.now_ms();
                let default = i64::try_from(DEFAULT_KEEP_FOR_MS).unwrap_or(i64::MAX);
                self.ids(
                    &format!(
                        "SELECT id FROM runs WHERE {ENDED}
                         AND $1 - COALESCE(ended_at, created_at) >= COALESCE(keep_for_ms, $2)
                         ORDER BY id"
                    ),
                    &[now, default],
                )
            }
        }
    }

    fn ids(&mut self, sql: &str, args: &[i64]) -> Result<Vec<String>, StoreError> {
        let params: Vec<&(dyn postgres::types::ToSql + Sync)> = args
            .iter()
            .map(|a| a as &(dyn postgres::types::ToSql + Sync))
            .collect();
        Ok(self
            .tx
            .query(sql, &params)
            .map_err(pg)?
            .iter()
            .map(|r| r.get(0))
            .collect())
    }

    /// Every digest a run references: in its journal, its row and its signals.
    fn references(&mut self, run: &str, f: &mut dyn FnMut(&str)) -> Result<(), StoreError> {
        let rows = self
            .tx
            .query(
                "SELECT data FROM journal WHERE run = $1
                 UNION ALL SELECT json_build_array(output_digest, error)::text
                    FROM runs WHERE id = $1
                 UNION ALL SELECT json_build_array(payload_digest)::text
                    FROM signals WHERE run = $1",
                &[&run],
            )
            .map_err(pg)?;
        for row in rows {
            let text: String = row.get(0);
            digests_in(&text, &mut *f);
        }
        Ok(())
    }

    #[allow(clippy::type_complexity)]
    fn plan(
        &mut self,
        runs: Vec<String>,
    ) -> Result<(Cleaned, Vec<String>, Vec<String>), StoreError> {
        let going: HashSet<String> = runs.iter().cloned().collect();
        let mut values: HashSet<String> = HashSet::new();
        let mut specs: HashSet<String> = HashSet::new();
        let mut events = 0u64;
        for run in &runs {
            self.references(run, &mut |d| {
                values.insert(d.to_string());
            })?;
            let row = self
                .tx
                .query_one(
                    "SELECT flow_digest, (SELECT COUNT(*) FROM journal WHERE run = $1)
                     FROM runs WHERE id = $1",
                    &[run],
                )
                .map_err(pg)?;
            events += u64::try_from(row.get::<_, i64>(1)).unwrap_or(0);
            specs.insert(row.get(0));
        }
        if !values.is_empty() || !specs.is_empty() {
            let others: Vec<String> = self
                .ids("SELECT id FROM runs ORDER BY id", &[])?
                .into_iter()
                .filter(|id| !going.contains(id))
                .collect();
            for run in &others {
                if values.is_empty() && specs.is_empty() {
                    break;
                }
                self.references(run, &mut |d| {
                    values.remove(d);
                })?;
                let spec: String = self
                    .tx
                    .query_one("SELECT flow_digest FROM runs WHERE id = $1", &[run])
                    .map_err(pg)?
                    .get(0);
                specs.remove(&spec);
            }
        }
        let mut cleaned = Cleaned {
            runs,
            events,
            ..Cleaned::default()
        };
        let mut plan_values = Vec::new();
        let mut sorted: Vec<String> = values.into_iter().collect();
        sorted.sort();
        for digest in sorted {
            let size: Option<i64> = self
                .tx
                .query_opt("SELECT size FROM vals WHERE digest = $1", &[&digest])
                .map_err(pg)?
                .map(|r| r.get(0));
            if let Some(size) = size {
                cleaned.values += 1;
                cleaned.bytes += u64::try_from(size).unwrap_or(0);
                plan_values.push(digest);
            }
        }
        let mut plan_specs = Vec::new();
        let mut sorted: Vec<String> = specs.into_iter().collect();
        sorted.sort();
        for digest in sorted {
            let len: Option<i64> = self
                .tx
                .query_opt(
                    "SELECT octet_length(json)::bigint + COALESCE((SELECT octet_length(bytes)
                     FROM spec_binaries b WHERE b.digest = $1), 0)::bigint
                     FROM specs WHERE digest = $1",
                    &[&digest],
                )
                .map_err(pg)?
                .map(|r| r.get(0));
            if let Some(len) = len {
                cleaned.specs += 1;
                cleaned.bytes += u64::try_from(len).unwrap_or(0);
                plan_specs.push(digest);
            }
        }
        Ok((cleaned, plan_values, plan_specs))
    }

    fn remove(
        &mut self,
        runs: &[String],
        values: &[String],
        specs: &[String],
    ) -> Result<(), StoreError> {
        for run in runs {
            let gone = self
                .tx
                .execute(
                    &format!("DELETE FROM runs WHERE id = $1 AND {ENDED}"),
                    &[run],
                )
                .map_err(pg)?;
            if gone == 0 {
                // Another process redrove the run since the plan read it: keeping everything
                // is the safe answer, so the batch fails.
                return Err(StoreError::Postgres(format!(
                    "run {run} changed while it was being cleaned; nothing was removed"
                )));
            }
            for table in ["journal", "signals", "logs"] {
                self.tx
                    .execute(&format!("DELETE FROM {table} WHERE run = $1"), &[run])
                    .map_err(pg)?;
            }
        }
        if !values.is_empty() {
            self.tx
                .execute("DELETE FROM vals WHERE digest = ANY($1)", &[&values])
                .map_err(pg)?;
            self.tx
                .execute(
                    "INSERT INTO meta (key, value) VALUES ($1, 1)
                     ON CONFLICT (key) DO UPDATE SET value = meta.value + 1",
                    &[&VALUES_REMOVED],
                )
                .map_err(pg)?;
            // This process's own writes later in this batch, and after, see the move too.
            let now: i64 = self
                .tx
                .query_one("SELECT value FROM meta WHERE key = $1", &[&VALUES_REMOVED])
                .map_err(pg)?
                .get(0);
            self.shared.notice_removed_values(now, &mut self.removed);
        }
        if !specs.is_empty() {
            self.tx
                .execute("DELETE FROM specs WHERE digest = ANY($1)", &[&specs])
                .map_err(pg)?;
            self.tx
                .execute(
                    "DELETE FROM spec_binaries WHERE digest = ANY($1)",
                    &[&specs],
                )
                .map_err(pg)?;
        }
        Ok(())
    }
}
