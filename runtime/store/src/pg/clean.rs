//! A clean on PostgreSQL: the same rule as the SQLite store's (see `writer::clean`): ended runs
//! go with their rows, and the values and FlowSpecs no remaining run references. Every value
//! lives in the database, so there are no files to remove after the commit. As there, what
//! an ended run references is read by one clean and kept in `refs`; the runs a clean reads
//! are read many to a statement.

use std::collections::{BTreeSet, HashMap, HashSet};

use super::writer::{Batch, Fail};
use crate::api::{CleanScope, Cleaned, DEFAULT_KEEP_FOR_MS, RunStatus, StoreError};
use crate::writer::{RUNS_A_READ, VALUES_REMOVED, digests_in};

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

    /// Calls `f` with each run of `runs` and every digest it references: in its journal, its
    /// row and its signals; [`RUNS_A_READ`] runs to a statement.
    fn references(
        &mut self,
        runs: &[String],
        f: &mut dyn FnMut(&str, &str),
    ) -> Result<(), StoreError> {
        for chunk in runs.chunks(RUNS_A_READ) {
            let rows = self
                .tx
                .query(
                    "SELECT run, data FROM journal WHERE run = ANY($1)
                     UNION ALL SELECT id, json_build_array(flow_digest, output_digest, error)::text
                        FROM runs WHERE id = ANY($1)
                     UNION ALL SELECT run, json_build_array(payload_digest)::text
                        FROM signals WHERE run = ANY($1)",
                    &[&chunk],
                )
                .map_err(pg)?;
            for row in rows {
                let run: &str = row.get(0);
                let text: &str = row.get(1);
                digests_in(text, |d| f(run, d));
            }
        }
        Ok(())
    }

    #[allow(clippy::type_complexity)]
    fn plan(
        &mut self,
        runs: Vec<String>,
    ) -> Result<(Cleaned, Vec<String>, Vec<String>), StoreError> {
        let going: HashSet<String> = runs.iter().cloned().collect();
        let mut named: HashSet<String> = HashSet::new();
        let mut specs: HashSet<String> = HashSet::new();
        let mut events = 0u64;
        let mut runs_read = 0;
        self.references(&runs, &mut |_, d| {
            named.insert(d.to_string());
        })?;
        for chunk in runs.chunks(RUNS_A_READ) {
            for row in self
                .tx
                .query(
                    "SELECT flow_digest, (SELECT COUNT(*) FROM journal j WHERE j.run = r.id)
                     FROM runs r WHERE id = ANY($1)",
                    &[&chunk],
                )
                .map_err(pg)?
            {
                events += u64::try_from(row.get::<_, i64>(1)).unwrap_or(0);
                specs.insert(row.get(0));
            }
        }
        // Only a stored value can go: the digest-shaped strings that name none (idempotency
        // keys) are dropped here, before anything is asked about them.
        let named: Vec<String> = named.into_iter().collect();
        let mut sizes: HashMap<String, i64> = HashMap::new();
        for chunk in named.chunks(RUNS_A_READ) {
            for row in self
                .tx
                .query(
                    "SELECT digest, size FROM vals WHERE digest = ANY($1)",
                    &[&chunk],
                )
                .map_err(pg)?
            {
                sizes.insert(row.get(0), row.get(1));
            }
        }
        let mut values: HashSet<String> = sizes.keys().cloned().collect();
        if !values.is_empty() || !specs.is_empty() {
            runs_read = self.read_unkept(&going, &mut values, &mut specs)?;
            self.keep_named_elsewhere(&runs, &mut values, &mut specs)?;
        }
        let mut cleaned = Cleaned {
            runs,
            events,
            runs_read,
            ..Cleaned::default()
        };
        let mut plan_values: Vec<String> = values.into_iter().collect();
        plan_values.sort();
        for digest in &plan_values {
            cleaned.values += 1;
            cleaned.bytes += u64::try_from(sizes[digest]).unwrap_or(0);
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

    /// Takes out of `values` and `specs` each that another ended run references, as `refs`
    /// holds it (a value, or the FlowSpec it was made from). Asked as if the `going` runs were
    /// gone already (their rows of `refs` deleted in a savepoint that is rolled back), so that
    /// each question is an index's look that stops at the first run it finds, whatever the
    /// number of runs going.
    fn keep_named_elsewhere(
        &mut self,
        going: &[String],
        values: &mut HashSet<String>,
        specs: &mut HashSet<String>,
    ) -> Result<(), StoreError> {
        self.tx.execute("SAVEPOINT clean_plan", &[]).map_err(pg)?;
        for chunk in going.chunks(RUNS_A_READ) {
            self.tx
                .execute("DELETE FROM refs WHERE run = ANY($1)", &[&chunk])
                .map_err(pg)?;
        }
        for set in [values, specs] {
            let asked: Vec<String> = set.iter().cloned().collect();
            for chunk in asked.chunks(RUNS_A_READ) {
                for row in self
                    .tx
                    .query(
                        "SELECT c.digest FROM unnest($1::text[]) AS c (digest)
                         WHERE EXISTS (SELECT 1 FROM refs r WHERE r.digest = c.digest)",
                        &[&chunk],
                    )
                    .map_err(pg)?
                {
                    set.remove(row.get::<_, &str>(0));
                }
            }
        }
        self.tx
            .execute("ROLLBACK TO SAVEPOINT clean_plan", &[])
            .map_err(pg)?;
        Ok(())
    }

    /// Reads the references of every run not in `going` whose references `refs` does not
    /// hold, found in one snapshot (a run that ends meanwhile is in one list or the other):
    /// one that has not ended (it is still writing) takes what it references out of `values`
    /// and its FlowSpec out of `specs`, and an ended one has them kept in `refs` (as every
    /// other ended run has), so each ended run's journal is read by one clean in its life. How
    /// many runs it read.
    fn read_unkept(
        &mut self,
        going: &HashSet<String>,
        values: &mut HashSet<String>,
        specs: &mut HashSet<String>,
    ) -> Result<u64, StoreError> {
        let (mut ended, mut open) = (Vec::new(), Vec::new());
        let mut seqs = HashMap::new();
        // Each arm through a partial index: the unread ended runs, and each status of a run
        // that has not ended.
        for row in self
            .tx
            .query(
                &format!(
                    "SELECT id, {ENDED}, next_seq FROM runs
                     WHERE (NOT refs_kept AND {ENDED}) OR status = 'running'
                        OR status = 'waiting' OR status = 'quarantined'
                     ORDER BY id"
                ),
                &[],
            )
            .map_err(pg)?
        {
            let run: String = row.get(0);
            if row.get(1) {
                if !going.contains(&run) {
                    seqs.insert(run.clone(), row.get::<_, i64>(2));
                    ended.push(run);
                }
            } else {
                open.push(run);
            }
        }
        self.references(&open, &mut |_, d| {
            values.remove(d);
            specs.remove(d);
        })?;
        for chunk in ended.chunks(RUNS_A_READ) {
            // In the order of the table's key, so that the inserts walk its pages once.
            let mut pairs = BTreeSet::new();
            self.references(chunk, &mut |run, d| {
                pairs.insert((d.to_string(), run.to_string()));
            })?;
            let (digests, runs): (Vec<String>, Vec<String>) = pairs.into_iter().unzip();
            // Only stored values and FlowSpecs: a key that merely looks like a digest is not
            // kept.
            self.tx
                .execute(
                    "INSERT INTO refs (digest, run)
                     SELECT u.digest, u.run FROM unnest($1::text[], $2::text[]) AS u (digest, run)
                     WHERE EXISTS (SELECT 1 FROM vals v WHERE v.digest = u.digest)
                        OR EXISTS (SELECT 1 FROM specs s WHERE s.digest = u.digest)
                     ON CONFLICT DO NOTHING",
                    &[&digests, &runs],
                )
                .map_err(pg)?;
            // Marked only if nothing was appended since the run was seen ended: a run
            // redriven meanwhile by a worker is read again by the next clean. (A signal, the
            // other way an ended run comes to reference more, waits for this clean's lock.)
            let seen: Vec<i64> = chunk.iter().map(|run| seqs[run]).collect();
            self.tx
                .execute(
                    &format!(
                        "UPDATE runs r SET refs_kept = TRUE
                         FROM unnest($1::text[], $2::bigint[]) AS s (id, seq)
                         WHERE r.id = s.id AND r.next_seq = s.seq AND r.{ENDED}"
                    ),
                    &[&chunk, &seen],
                )
                .map_err(pg)?;
        }
        Ok((open.len() + ended.len()) as u64)
    }

    fn remove(
        &mut self,
        runs: &[String],
        values: &[String],
        specs: &[String],
    ) -> Result<(), StoreError> {
        for chunk in runs.chunks(RUNS_A_READ) {
            let gone = self
                .tx
                .execute(
                    &format!("DELETE FROM runs WHERE id = ANY($1) AND {ENDED}"),
                    &[&chunk],
                )
                .map_err(pg)?;
            if gone != chunk.len() as u64 {
                // Another process redrove a run since the plan read it: keeping everything
                // is the safe answer, so the batch fails.
                return Err(StoreError::Postgres(format!(
                    "{} of the runs changed while they were being cleaned; nothing was removed",
                    chunk.len() as u64 - gone
                )));
            }
            for table in ["journal", "signals", "logs", "refs"] {
                self.tx
                    .execute(
                        &format!("DELETE FROM {table} WHERE run = ANY($1)"),
                        &[&chunk],
                    )
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
