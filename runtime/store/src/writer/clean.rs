//! The SQL of a clean: which ended runs go, what they reference, and which of those values and
//! FlowSpecs no remaining run references.
//!
//! References are found by reading every digest-shaped string (64 lowercase hex digits, a
//! whole JSON string) in what a run keeps: its journal rows, its row (spec, output, error) and
//! its signals' payloads (logs hold text, never digests). The store does not know the
//! journal's event kinds, so it over-approximates: a string that merely looks like a digest
//! (an idempotency key) keeps a value that happens to have that digest, and nothing a run
//! references is ever missed.
//!
//! A clean reads the runs it removes, the runs that have not ended, and the ended runs no
//! clean has read; what an ended run references (its stored values and its FlowSpec) it keeps
//! in `refs` (schema version 7), so the next clean asks that table about its candidates
//! instead of reading every journal again. An ended run's references change only when it is
//! signalled or redriven, and both mark it to be read again (`refs_kept = 0`, see
//! `schema.rs`).

use std::collections::{BTreeSet, HashMap, HashSet};

use rusqlite::{OptionalExtension, params};

use super::command::Fail;
use super::group_commit::Writer;
use super::{int, sqlite};
use crate::api::{CleanScope, Cleaned, DEFAULT_KEEP_FOR_MS, RunStatus, StoreError};
use crate::blobs::is_digest;

/// The statuses of ended runs, as stored: the only runs a clean may remove.
const ENDED: &str = "status IN ('succeeded', 'failed', 'canceled')";

/// The statuses of the runs that have not ended, whose references a clean reads each time.
const NOT_ENDED: &str = "status IN ('running', 'waiting', 'quarantined')";

/// How many runs' references a clean reads before it writes what it kept of them: enough
/// that the writes of many runs go in the order of the table's key, few enough that what is
/// held meanwhile stays small. (The PostgreSQL store reads as many in one statement.)
pub(crate) const RUNS_A_READ: usize = 256;

/// The meta key counting the cleans that removed values: every writer reads it at the start of
/// each batch and forgets the digests it remembers as stored when it moved.
pub(crate) const VALUES_REMOVED: &str = "values_removed";

/// Calls `f` with every digest-shaped JSON string in `text`.
pub(crate) fn digests_in(text: &str, mut f: impl FnMut(&str)) {
    let bytes = text.as_bytes();
    let mut at = 0;
    while let Some(open) = bytes[at..].iter().position(|&b| b == b'"') {
        let start = at + open + 1;
        let end = start + 64;
        if bytes.get(end) == Some(&b'"')
            && let Some(candidate) = text.get(start..end)
            && is_digest(candidate)
        {
            f(candidate);
            at = end + 1;
        } else {
            at = start;
        }
    }
}

/// The runs that have not ended, through `runs_status_due`, in no order: ordered by id,
/// SQLite would walk every run.
fn open_runs() -> String {
    format!("SELECT id FROM runs WHERE {NOT_ENDED}")
}

/// The ended runs no clean has read, through their index, named: left to choose, SQLite took
/// `runs_status_due` and walked every ended run.
fn unread_ended_runs() -> String {
    format!(
        "SELECT id FROM runs INDEXED BY runs_refs_unkept WHERE refs_kept = 0 AND {ENDED}
         ORDER BY id"
    )
}

/// What a clean found to remove, before anything is removed.
pub(crate) struct Plan {
    /// The report.
    pub(crate) cleaned: Cleaned,
    /// The digests of the values to remove.
    values: Vec<String>,
    /// The digests of the FlowSpecs to remove.
    specs: Vec<String>,
    /// The digests of the values kept as files, removed after the commit.
    pub(crate) blob_files: Vec<String>,
}

impl Writer {
    /// Forgets the digests this process remembers as stored when a clean (of any process)
    /// removed values since the last look, so that storing such a value again writes it
    /// again. Read at the start of each batch, inside its transaction.
    pub(super) fn notice_removed_values(&mut self) -> Result<(), StoreError> {
        let now: i64 = self
            .conn
            .prepare_cached("SELECT COALESCE((SELECT value FROM meta WHERE key = ?1), 0)")
            .and_then(|mut s| s.query_row([VALUES_REMOVED], |r| r.get(0)))
            .map_err(sqlite)?;
        self.shared
            .notice_removed_values(now, &mut self.values_removed);
        Ok(())
    }

    /// The clean command: plans, and unless `dry_run`, removes. Refusals (a run not ended or
    /// not there) come before the first write.
    pub(super) fn clean(&mut self, scope: &CleanScope, dry_run: bool) -> Result<Plan, Fail> {
        let runs = self.runs_to_clean(scope)?;
        let plan = self.plan(runs)?;
        if !dry_run && !plan.cleaned.runs.is_empty() {
            self.remove(&plan).map_err(|e| Fail::Batch(sqlite(e)))?;
        }
        Ok(plan)
    }

    /// The ended runs `scope` names, oldest first.
    fn runs_to_clean(&self, scope: &CleanScope) -> Result<Vec<String>, StoreError> {
        match scope {
            CleanScope::Run(id) => {
                let status: Option<String> = self
                    .conn
                    .prepare_cached("SELECT status FROM runs WHERE id = ?1")
                    .and_then(|mut s| s.query_row([id], |r| r.get(0)).optional())
                    .map_err(sqlite)?;
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
            CleanScope::AllEnded => self.ids(&format!("SELECT id FROM runs WHERE {ENDED}"), &[]),
            CleanScope::Expired => {
                // `now - end >= keep` rather than `end + keep <= now`: a keep time of years
                // must not overflow.
                let now = self.clock.now_ms();
                let default = int(DEFAULT_KEEP_FOR_MS)?;
                self.ids(
                    &format!(
                        "SELECT id FROM runs WHERE {ENDED}
                         AND ?1 - COALESCE(ended_at, created_at) >= COALESCE(keep_for_ms, ?2)"
                    ),
                    &[now, default],
                )
            }
        }
    }

    fn ids(&self, sql: &str, args: &[i64]) -> Result<Vec<String>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(&format!("{sql} ORDER BY id"))
            .map_err(sqlite)?;
        stmt.query_map(rusqlite::params_from_iter(args), |r| r.get(0))
            .and_then(|rows| rows.collect())
            .map_err(sqlite)
    }

    /// Counts what the runs hold and finds the values and FlowSpecs only they reference.
    fn plan(&self, runs: Vec<String>) -> Result<Plan, StoreError> {
        let going: HashSet<&str> = runs.iter().map(String::as_str).collect();
        let mut values: HashSet<String> = HashSet::new();
        let mut specs: HashSet<String> = HashSet::new();
        let mut events = 0u64;
        let mut runs_read = 0;
        for run in &runs {
            self.references(run, &mut |d| {
                values.insert(d.to_string());
            })?;
            let (spec, count): (String, i64) = self
                .conn
                .prepare_cached(
                    "SELECT flow_digest, (SELECT COUNT(*) FROM journal WHERE run = ?1)
                     FROM runs WHERE id = ?1",
                )
                .and_then(|mut s| s.query_row([run], |r| Ok((r.get(0)?, r.get(1)?))))
                .map_err(sqlite)?;
            events += u64::try_from(count).unwrap_or(0);
            specs.insert(spec);
        }
        // Only a stored value can go: the digest-shaped strings that name none (idempotency
        // keys) are dropped here, before anything is asked about them.
        let mut stored: HashMap<String, (i64, bool)> = HashMap::new();
        // In the order of the tables' keys, here and below, so that the look-ups walk their
        // pages once rather than at random.
        let mut values: Vec<String> = values.into_iter().collect();
        values.sort();
        for digest in values {
            let row: Option<(i64, bool)> = self
                .conn
                .prepare_cached("SELECT size, external FROM vals WHERE digest = ?1")
                .and_then(|mut s| {
                    s.query_row([&digest], |r| Ok((r.get(0)?, r.get(1)?)))
                        .optional()
                })
                .map_err(sqlite)?;
            if let Some(row) = row {
                stored.insert(digest, row);
            }
        }
        let mut values: HashSet<String> = stored.keys().cloned().collect();
        if !values.is_empty() || !specs.is_empty() {
            runs_read = self.read_unkept(&going, &mut values, &mut specs)?;
            // What another ended run references keeps it, as `refs` holds it: a value, or
            // the FlowSpec it was made from.
            self.keep_named_elsewhere(&mut values, &going)?;
            self.keep_named_elsewhere(&mut specs, &going)?;
        }
        let mut cleaned = Cleaned {
            runs,
            events,
            runs_read,
            ..Cleaned::default()
        };
        let mut plan_values = Vec::new();
        let mut blob_files = Vec::new();
        let mut sorted: Vec<String> = values.into_iter().collect();
        sorted.sort();
        for digest in sorted {
            let (size, external) = stored[&digest];
            cleaned.values += 1;
            cleaned.bytes += u64::try_from(size).unwrap_or(0);
            if external {
                cleaned.blobs += 1;
                blob_files.push(digest.clone());
            }
            plan_values.push(digest);
        }
        let mut plan_specs = Vec::new();
        let mut sorted: Vec<String> = specs.into_iter().collect();
        sorted.sort();
        for digest in sorted {
            let len: Option<i64> = self
                .conn
                .prepare_cached(
                    "SELECT length(CAST(json AS BLOB))
                     + ifnull((SELECT length(bytes) FROM spec_binaries b WHERE b.digest = ?1), 0)
                     FROM specs WHERE digest = ?1",
                )
                .and_then(|mut s| s.query_row([&digest], |r| r.get(0)).optional())
                .map_err(sqlite)?;
            if let Some(len) = len {
                cleaned.specs += 1;
                cleaned.bytes += u64::try_from(len).unwrap_or(0);
                plan_specs.push(digest);
            }
        }
        Ok(Plan {
            cleaned,
            values: plan_values,
            specs: plan_specs,
            blob_files,
        })
    }

    /// Reads the references of every run not in `going` whose references `refs` does not
    /// hold: one that has not ended (it is still writing) takes what it references out of
    /// `values` and its FlowSpec out of `specs`, and one that has ended has them kept in
    /// `refs` (as every other ended run has), so each ended run's journal is read by one clean
    /// in its life, not by every one. How many runs it read.
    fn read_unkept(
        &self,
        going: &HashSet<&str>,
        values: &mut HashSet<String>,
        specs: &mut HashSet<String>,
    ) -> Result<u64, StoreError> {
        // Not `ids`: its order by id would walk every run for the runs that have not ended.
        let runs = |sql: &str| -> Result<Vec<String>, StoreError> {
            self.conn
                .prepare(sql)
                .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
                .map_err(sqlite)
        };
        let open = runs(&open_runs())?;
        let ended: Vec<String> = runs(&unread_ended_runs())?
            .into_iter()
            .filter(|run| !going.contains(run.as_str()))
            .collect();
        for run in &open {
            self.references(run, &mut |d| {
                values.remove(d);
                specs.remove(d);
            })?;
        }
        for chunk in ended.chunks(RUNS_A_READ) {
            // In the order of the table's key, so that the inserts walk its pages once.
            let mut pairs = BTreeSet::new();
            for run in chunk {
                self.references(run, &mut |d| {
                    pairs.insert((d.to_string(), run.as_str()));
                })?;
            }
            // Only stored values and FlowSpecs: a key that merely looks like a digest is not
            // kept.
            let mut insert = self
                .conn
                .prepare_cached(
                    "INSERT OR IGNORE INTO refs (digest, run)
                     SELECT ?1, ?2 WHERE EXISTS (SELECT 1 FROM vals WHERE digest = ?1)
                        OR EXISTS (SELECT 1 FROM specs WHERE digest = ?1)",
                )
                .map_err(sqlite)?;
            for (digest, run) in &pairs {
                insert.execute(params![digest, run]).map_err(sqlite)?;
            }
            let mut kept = self
                .conn
                .prepare_cached("UPDATE runs SET refs_kept = 1 WHERE id = ?1")
                .map_err(sqlite)?;
            for run in chunk {
                kept.execute([run]).map_err(sqlite)?;
            }
        }
        Ok((open.len() + ended.len()) as u64)
    }

    /// Takes out of `digests` each that `refs` holds for a run not in `going`; for each it
    /// stops at the first such run.
    fn keep_named_elsewhere(
        &self,
        digests: &mut HashSet<String>,
        going: &HashSet<&str>,
    ) -> Result<(), StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT run FROM refs WHERE digest = ?1")
            .map_err(sqlite)?;
        let mut named = Vec::new();
        let mut asked: Vec<&String> = digests.iter().collect();
        asked.sort();
        for digest in asked {
            let mut rows = stmt.query([digest]).map_err(sqlite)?;
            while let Some(row) = rows.next().map_err(sqlite)? {
                let run: String = row.get(0).map_err(sqlite)?;
                if !going.contains(run.as_str()) {
                    named.push(digest.clone());
                    break;
                }
            }
        }
        for digest in named {
            digests.remove(&digest);
        }
        Ok(())
    }

    /// Calls `f` with every digest a run references: in its journal, its row and its signals.
    fn references(&self, run: &str, f: &mut dyn FnMut(&str)) -> Result<(), StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT data FROM journal WHERE run = ?1
                 UNION ALL SELECT json_array(flow_digest, output_digest, json(error))
                    FROM runs WHERE id = ?1
                 UNION ALL SELECT json_array(payload_digest) FROM signals WHERE run = ?1",
            )
            .map_err(sqlite)?;
        let mut rows = stmt.query([run]).map_err(sqlite)?;
        while let Some(row) = rows.next().map_err(sqlite)? {
            let text: String = row.get(0).map_err(sqlite)?;
            digests_in(&text, &mut *f);
        }
        Ok(())
    }

    /// Deletes the plan's runs (each only if it is still ended: this is the transaction that
    /// judges it), their rows, and the values and specs only they referenced.
    fn remove(&mut self, plan: &Plan) -> rusqlite::Result<()> {
        for run in &plan.cleaned.runs {
            let gone = self
                .conn
                .prepare_cached(&format!("DELETE FROM runs WHERE id = ?1 AND {ENDED}"))?
                .execute([run])?;
            if gone == 0 {
                // Cannot happen inside this transaction (the plan read the same state); if it
                // did, keeping everything is the safe answer.
                return Err(rusqlite::Error::QueryReturnedNoRows);
            }
            for table in ["journal", "signals", "logs", "refs"] {
                self.conn
                    .prepare_cached(&format!("DELETE FROM {table} WHERE run = ?1"))?
                    .execute([run])?;
            }
        }
        for digest in &plan.values {
            self.conn
                .prepare_cached("DELETE FROM vals WHERE digest = ?1")?
                .execute([digest])?;
        }
        for digest in &plan.specs {
            self.conn
                .prepare_cached("DELETE FROM specs WHERE digest = ?1")?
                .execute([digest])?;
            self.conn
                .prepare_cached("DELETE FROM spec_binaries WHERE digest = ?1")?
                .execute([digest])?;
        }
        if !plan.values.is_empty() {
            // Other writers forget the values they remember as stored when this moves.
            self.conn
                .prepare_cached(
                    "INSERT INTO meta (key, value) VALUES (?1, 1)
                     ON CONFLICT (key) DO UPDATE SET value = value + 1",
                )?
                .execute(params![VALUES_REMOVED])?;
            // This process's own writes later in this batch, and after, see the move too.
            let now: i64 = self
                .conn
                .prepare_cached("SELECT value FROM meta WHERE key = ?1")?
                .query_row([VALUES_REMOVED], |r| r.get(0))?;
            self.shared
                .notice_removed_values(now, &mut self.values_removed);
        }
        Ok(())
    }
}

/// The sizes of the database file, in pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pages {
    /// Pages in the file.
    pub(crate) total: i64,
    /// Of those, pages on the free list, which new rows reuse before the file grows.
    pub(crate) free: i64,
}

/// The database's page counts on `conn`.
pub(crate) fn pages(conn: &rusqlite::Connection) -> Result<Pages, StoreError> {
    let total = conn
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .map_err(sqlite)?;
    let free = conn
        .query_row("PRAGMA freelist_count", [], |r| r.get(0))
        .map_err(sqlite)?;
    Ok(Pages { total, free })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn count_refs(text: &str) -> HashMap<String, usize> {
        let mut out = HashMap::new();
        digests_in(text, |d| *out.entry(d.to_string()).or_insert(0) += 1);
        out
    }

    /// The runs a clean reads are found through indexes of those runs alone, however many
    /// ended runs the store keeps (the plan of a store with 2,000 rows in `runs` and, as a
    /// store has, no statistics).
    #[test]
    fn the_runs_a_clean_reads_are_found_through_their_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::schema::open_writer(&dir.path().join("reel.db")).unwrap();
        conn.execute_batch(
            "WITH RECURSIVE g(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM g WHERE n < 1999)
             INSERT INTO runs (id, flow, flow_digest, cwd, status, created_at, durability)
             SELECT 'run-' || n, 'f', 'd', '/', CASE WHEN n % 100 = 0 THEN 'waiting'
                 ELSE 'succeeded' END, n, 'fast' FROM g;
             UPDATE runs SET refs_kept = 1 WHERE status = 'succeeded' AND id > 'run-1';",
        )
        .unwrap();
        for (sql, index) in [
            (open_runs(), "runs_status_due"),
            (unread_ended_runs(), "runs_refs_unkept"),
        ] {
            let plan: Vec<String> = conn
                .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .unwrap()
                .query_map([], |r| r.get::<_, String>(3))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            assert!(
                plan.iter().any(|step| step.contains(index)),
                "{sql}: {plan:?}"
            );
            assert!(!plan.iter().any(|s| s.contains("TEMP B-TREE")), "{plan:?}");
        }
    }

    #[test]
    fn digests_are_whole_json_strings_of_64_lowercase_hex_digits() {
        let a = "a".repeat(64);
        let b = "0123456789abcdef".repeat(4);
        let text = format!(
            r#"{{"inputs":"{a}","key":null,"error":{{"cause":"{b}","message":"x{a}"}},"upper":"{}","short":"{}"}}"#,
            a.to_uppercase(),
            &a[..63]
        );
        let found = count_refs(&text);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[&a], 1);
        assert_eq!(found[&b], 1);
    }
}
