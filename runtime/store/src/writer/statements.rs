//! The SQL of each command: the statements it runs inside the batch's transaction. Each
//! command reaches its first write only when nothing can refuse it any more, so a refusal
//! (`Fail::Command`) leaves nothing behind.

use rusqlite::{OptionalExtension, params};

use super::command::{ClaimOut, Cmd, Fail, Row, Tag, Update, ValueText};
use super::group_commit::{Appended, Writer};
use super::{durability_str, int, parse_durability, sqlite};
use crate::api::Kept;
use crate::api::{Durability, NewRun, Owner, StoreError};
use crate::blobs::{self, INLINE_MAX};

/// Appends that checked their run's fence with a statement of their own (the others followed
/// one in the same batch), for the test that batching them saves those statements.
#[cfg(test)]
pub(crate) static FENCE_CHECKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Writer {
    /// Stores a value once (`INSERT OR IGNORE`); a blob's row says it is external.
    pub(super) fn put_value(
        &self,
        digest: &str,
        text: &ValueText,
        size: i64,
    ) -> Result<(), StoreError> {
        let json = match text {
            ValueText::Inline(t) => Some(&**t),
            ValueText::External(t) => {
                // Its putter wrote the file; a clean may have removed it since (it removes
                // files only in a write transaction, so not during this one).
                if !blobs::blob_path(&self.blobs, digest).is_file() {
                    blobs::write_blob(&self.blobs, digest, t)?;
                }
                None
            }
        };
        self.conn
            .prepare_cached(
                "INSERT OR IGNORE INTO vals (digest, json, size, external)
                 VALUES (?1, ?2, ?3, ?4)",
            )
            .and_then(|mut s| s.execute(params![digest, json, size, json.is_none()]))
            .map_err(sqlite)?;
        Ok(())
    }

    /// Writes again what rows name and a clean may have removed since the store vouched for
    /// it (see [`Kept`]); whatever is still there is left as it is.
    fn keep(&self, kept: &[Kept]) -> Result<(), Fail> {
        for k in kept.iter().filter(|k| k.stale(self.values_removed)) {
            if k.spec {
                self.conn
                    .prepare_cached("INSERT OR IGNORE INTO specs (digest, json) VALUES (?1, ?2)")
                    .and_then(|mut s| s.execute(params![k.digest, &*k.text]))
                    .map_err(|e| Fail::Batch(sqlite(e)))?;
            } else {
                let size = i64::try_from(k.text.len()).unwrap_or(i64::MAX);
                let text = if k.text.len() > INLINE_MAX {
                    ValueText::External(k.text.clone())
                } else {
                    ValueText::Inline(k.text.clone())
                };
                self.put_value(&k.digest, &text, size)
                    .map_err(Fail::Batch)?;
            }
        }
        Ok(())
    }

    /// Deletes the blob files of `digests` that no row names any more.
    fn unlink(&self, digests: &[String]) -> Result<(), Fail> {
        for digest in digests {
            let named: bool = self
                .conn
                .prepare_cached("SELECT EXISTS (SELECT 1 FROM vals WHERE digest = ?1)")
                .and_then(|mut s| s.query_row([digest], |r| r.get(0)))
                .map_err(sqlite)?;
            if !named {
                blobs::remove_blob(&self.blobs, digest)?;
            }
        }
        Ok(())
    }

    /// Why a fenced statement matched no row: no run, a lost lease, or (`other`) something
    /// the statement itself knows.
    fn why_not(&self, run: &str, token: u64, other: impl FnOnce(u64) -> StoreError) -> StoreError {
        let row = self
            .conn
            .prepare_cached("SELECT lease_token, next_seq FROM runs WHERE id = ?1")
            .and_then(|mut s| {
                s.query_row([run], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))
                    .optional()
            });
        match row {
            Err(e) => sqlite(e),
            Ok(None) => StoreError::NotFound(run.to_string()),
            Ok(Some((t, _))) if u64::try_from(t).ok() != Some(token) => StoreError::LeaseLost {
                run: run.to_string(),
            },
            Ok(Some((_, next))) => other(u64::try_from(next).unwrap_or(0)),
        }
    }

    /// Runs one command. Each reaches its first write only when nothing can refuse it any
    /// more, so a refusal (`Fail::Command`) leaves nothing behind.
    pub(super) fn exec(&mut self, cmd: &mut Cmd) -> Result<(), Fail> {
        match cmd {
            Cmd::Value { .. } | Cmd::Sync { .. } => Ok(()),
            Cmd::Spec { digest, json, .. } => {
                self.conn
                    .prepare_cached("INSERT OR IGNORE INTO specs (digest, json) VALUES (?1, ?2)")
                    .and_then(|mut s| s.execute(params![&*digest, &*json]))
                    .map_err(sqlite)?;
                Ok(())
            }
            Cmd::SpecBinary {
                digest,
                layout,
                bytes,
            } => {
                self.conn
                    .prepare_cached(
                        "INSERT OR REPLACE INTO spec_binaries (digest, layout, bytes)
                         VALUES (?1, ?2, ?3)",
                    )
                    .and_then(|mut s| s.execute(params![&*digest, *layout, &*bytes]))
                    .map_err(sqlite)?;
                Ok(())
            }
            Cmd::Append {
                tag,
                first_seq,
                rows,
                kept,
            } => {
                self.append(tag, *first_seq, rows)?;
                self.keep(kept)
            }
            Cmd::Update { tag, update } => self.update(tag, update),
            Cmd::Log { tag, log } => {
                let changed = self
                    .conn
                    .prepare_cached(
                        "INSERT INTO logs (run, step, idx, attempt, at, text)
                         SELECT ?1, ?2, ?3, ?4, ?5, ?6
                         WHERE EXISTS (SELECT 1 FROM runs WHERE id = ?1 AND lease_token = ?7)",
                    )
                    .and_then(|mut s| {
                        s.execute(params![
                            tag.run,
                            log.step,
                            log.index,
                            log.attempt,
                            log.at,
                            log.text,
                            int(tag.token).unwrap_or(-1),
                        ])
                    })
                    .map_err(sqlite)?;
                if changed == 0 {
                    return Err(self
                        .why_not(&tag.run, tag.token, |_| lease_lost(&tag.run))
                        .into());
                }
                Ok(())
            }
            Cmd::Consume { tag, seq, by } => {
                let values = (int(*seq)?, int(*by)?, int(tag.token)?);
                let changed = self
                    .conn
                    .prepare_cached(
                        "UPDATE signals SET consumed_by = ?3 WHERE run = ?1 AND seq = ?2
                         AND EXISTS (SELECT 1 FROM runs WHERE id = ?1 AND lease_token = ?4)",
                    )
                    .and_then(|mut s| s.execute(params![tag.run, values.0, values.1, values.2]))
                    .map_err(sqlite)?;
                if changed == 0 {
                    let (run, seq) = (&tag.run, *seq);
                    return Err(self
                        .why_not(run, tag.token, |_| {
                            StoreError::Sqlite(format!("run {run} has no signal {seq}"))
                        })
                        .into());
                }
                Ok(())
            }
            Cmd::Release { tag, .. } => {
                // A token that no longer matches means another process holds the run now:
                // there is nothing of ours to give up.
                self.conn
                    .prepare_cached(
                        "UPDATE runs SET lease_owner = NULL, lease_pid = NULL, lease_host = NULL,
                         lease_started = NULL, lease_expires_at = NULL
                         WHERE id = ?1 AND lease_token = ?2",
                    )
                    .and_then(|mut s| s.execute(params![tag.run, int(tag.token).unwrap_or(-1)]))
                    .map_err(sqlite)?;
                Ok(())
            }
            Cmd::Create {
                run,
                rows,
                owner,
                lease_ms,
                ..
            } => {
                self.create(run, owner, *lease_ms)?;
                // The first events land in the same transaction as the run itself.
                let tag = Tag {
                    run: run.id.clone(),
                    token: 1,
                    durable: run.durability == Durability::Durable,
                };
                if !rows.is_empty() {
                    self.append(&tag, 0, rows)?;
                }
                self.keep(&run.kept)
            }
            Cmd::Claim {
                run,
                owner,
                lease_ms,
                out,
                ..
            } => {
                *out = self.claim(run, owner, *lease_ms)?;
                Ok(())
            }
            Cmd::Renew { tag, lease_ms, .. } => {
                let expires = self
                    .clock
                    .now_ms()
                    .saturating_add(int(*lease_ms).unwrap_or(i64::MAX));
                let changed = self
                    .conn
                    .prepare_cached(
                        "UPDATE runs SET lease_expires_at = ?3
                         WHERE id = ?1 AND lease_token = ?2 AND lease_owner IS NOT NULL",
                    )
                    .and_then(|mut s| {
                        s.execute(params![tag.run, int(tag.token).unwrap_or(-1), expires])
                    })
                    .map_err(sqlite)?;
                if changed == 0 {
                    // Same token but no holder: the lease was given up, so it is lost too.
                    return Err(self
                        .why_not(&tag.run, tag.token, |_| lease_lost(&tag.run))
                        .into());
                }
                Ok(())
            }
            Cmd::Signal {
                run,
                name,
                payload,
                seq,
                ..
            } => {
                *seq = self.signal(run, name, &payload.digest)?;
                self.keep(std::slice::from_ref(payload))
            }
            Cmd::Clean {
                scope,
                dry_run,
                out,
                ..
            } => {
                let plan = self.clean(scope, *dry_run)?;
                *out = (plan.cleaned, plan.blob_files);
                Ok(())
            }
            Cmd::Unlink { digests, .. } => self.unlink(digests),
            Cmd::Cancel { run, done, .. } => {
                let changed = self
                    .conn
                    .prepare_cached(
                        "UPDATE runs SET cancel_requested = 1
                         WHERE id = ?1 AND status NOT IN ('succeeded', 'failed', 'canceled')",
                    )
                    .and_then(|mut s| s.execute([run.as_str()]))
                    .map_err(sqlite)?;
                *done = changed > 0;
                if !*done && !self.exists(run)? {
                    return Err(StoreError::NotFound(run.clone()).into());
                }
                Ok(())
            }
        }
    }

    fn exists(&self, run: &str) -> Result<bool, StoreError> {
        self.conn
            .prepare_cached("SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1)")
            .and_then(|mut s| s.query_row([run], |r| r.get(0)))
            .map_err(sqlite)
    }

    fn append(&mut self, tag: &Tag, first_seq: u64, rows: &[Row]) -> Result<(), Fail> {
        #[cfg(test)]
        if super::lock(&self.shared.fail_append)
            .as_ref()
            .is_some_and(|(run, seq)| *run == tag.run && *seq == first_seq)
        {
            return Err(Fail::Command(StoreError::Sqlite(
                "injected failure".to_string(),
            )));
        }
        let next = first_seq + rows.len() as u64;
        let run = &tag.run;
        if let Some(a) = self
            .appended
            .iter_mut()
            .find(|a| a.run == *run && a.token == tag.token && a.next == first_seq)
        {
            // This batch already checked the fence (nothing else in a batch touches a run's
            // lease between two appends: see `run_in_batch`) and the journal ends where this
            // append starts. The journal's end is stored once, at the batch's end: an `UPDATE`
            // of the run's row per append was one statement in six of a fast run's writer.
            a.next = next;
        } else {
            #[cfg(test)]
            FENCE_CHECKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.store_journal_ends(Some(run)).map_err(Fail::Batch)?;
            // Fencing and continuity in one statement: the lease must still be ours and the
            // journal must end exactly where this append starts.
            if !self.move_journal_end(&tag.run, tag.token, first_seq, next)? {
                return Err(Fail::Command(self.why_not(&tag.run, tag.token, |found| {
                    StoreError::Continuity {
                        run: tag.run.clone(),
                        expected: first_seq,
                        found,
                    }
                })));
            }
            self.appended.push(Appended {
                run: run.clone(),
                token: tag.token,
                stored: next,
                next,
            });
        }
        // The fence moved: from here on a failure cannot be undone alone.
        let batch = |e: rusqlite::Error| Fail::Batch(sqlite(e));
        let mut insert = self
            .conn
            .prepare_cached(
                "INSERT INTO journal (run, seq, at, kind, step, idx, attempt, data)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .map_err(batch)?;
        for (seq, row) in (first_seq..).zip(rows) {
            insert
                .execute(params![
                    tag.run,
                    int(seq).map_err(Fail::Batch)?,
                    row.at,
                    row.kind,
                    row.step,
                    row.index,
                    row.attempt,
                    row.data,
                ])
                .map_err(batch)?;
        }
        Ok(())
    }

    /// Moves `run`'s journal end from `from` to `to` if its lease is still `token` and its
    /// journal ends at `from` (fencing and continuity in one statement); `false` if not.
    fn move_journal_end(
        &self,
        run: &str,
        token: u64,
        from: u64,
        to: u64,
    ) -> Result<bool, StoreError> {
        let changed = self
            .conn
            .prepare_cached(
                "UPDATE runs SET next_seq = ?1 WHERE id = ?2 AND lease_token = ?3 AND next_seq = ?4",
            )
            .and_then(|mut s| {
                s.execute(params![
                    int(to).unwrap_or(-1),
                    run,
                    int(token).unwrap_or(-1),
                    int(from).unwrap_or(-1),
                ])
            })
            .map_err(sqlite)?;
        Ok(changed > 0)
    }

    /// Writes `runs.next_seq` of every run this batch appended to past where its fence was
    /// checked (of `run` alone, if given). It moves only forward from what the batch itself
    /// stored, under the lease the batch checked; anything else is a bug. A failure fails the
    /// batch.
    pub(super) fn store_journal_ends(&mut self, run: Option<&str>) -> Result<(), StoreError> {
        let mut i = 0;
        while i < self.appended.len() {
            if run.is_some_and(|run| self.appended[i].run != run) {
                i += 1;
                continue;
            }
            let a = self.appended.swap_remove(i);
            if a.next == a.stored {
                continue;
            }
            if !self.move_journal_end(&a.run, a.token, a.stored, a.next)? {
                return Err(StoreError::Sqlite(format!(
                    "run {} changed under the batch appending to it",
                    a.run
                )));
            }
        }
        Ok(())
    }

    fn update(&mut self, tag: &Tag, u: &Update) -> Result<(), Fail> {
        // One statement for every kind of update keeps it in the statement cache; a NULL
        // parameter means "leave as it is".
        let changed = self
            .conn
            .prepare_cached(
                "UPDATE runs SET
                    status = COALESCE(?3, status),
                    due_at = CASE WHEN ?4 THEN ?5 ELSE due_at END,
                    waiting_on = COALESCE(?6, waiting_on),
                    signal_pending = CASE WHEN ?7 THEN EXISTS (
                        SELECT 1 FROM signals WHERE run = ?1 AND consumed_by IS NULL)
                        ELSE signal_pending END,
                    ended_at = COALESCE(?8, ended_at),
                    output_digest = COALESCE(?9, output_digest),
                    error = COALESCE(?10, error),
                    -- A cancel request is fulfilled when the run ends, and one left by an older
                    -- reel is dropped when the run is redriven: else a redrive cancels itself.
                    cancel_requested = CASE
                        WHEN ?3 IN ('succeeded', 'failed', 'canceled') THEN 0
                        WHEN ?3 = 'running' AND status IN ('failed', 'canceled') THEN 0
                        ELSE cancel_requested END,
                    -- Only a run that stays ended keeps what a clean read of it (`refs`).
                    refs_kept = CASE WHEN ?3 IS NULL THEN refs_kept ELSE 0 END
                 WHERE id = ?1 AND lease_token = ?2",
            )
            .and_then(|mut s| {
                s.execute(params![
                    tag.run,
                    int(tag.token).unwrap_or(-1),
                    u.status,
                    u.due_at.is_some(),
                    u.due_at.flatten(),
                    u.waiting_on,
                    u.clear_signal_pending,
                    u.ended_at,
                    u.output_digest,
                    u.error,
                ])
            })
            .map_err(sqlite)?;
        if changed == 0 {
            return Err(Fail::Command(
                self.why_not(&tag.run, tag.token, |_| lease_lost(&tag.run)),
            ));
        }
        Ok(())
    }

    fn create(&mut self, run: &NewRun, owner: &Owner, lease_ms: u64) -> Result<(), Fail> {
        if self.exists(&run.id)? {
            return Err(Fail::Command(StoreError::Sqlite(format!(
                "run {} already exists",
                run.id
            ))));
        }
        let expires = self
            .clock
            .now_ms()
            .saturating_add(int(lease_ms).unwrap_or(i64::MAX));
        self.conn
            .prepare_cached(
                "INSERT INTO runs (id, flow, flow_digest, source, source_abs, cwd, parent, status,
                    created_at, keep_for_ms, durability, lease_owner, lease_pid, lease_host,
                    lease_started, lease_expires_at, lease_token, next_seq)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'running', ?8, ?9, ?10, ?11, ?12, ?13, ?14,
                    ?15, 1, 0)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    run.id,
                    run.flow,
                    run.flow_digest,
                    run.source,
                    run.source_abs,
                    run.cwd,
                    run.parent,
                    run.created_at,
                    run.keep_for_ms.map(|k| int(k).unwrap_or(i64::MAX)),
                    durability_str(run.durability),
                    owner.id,
                    owner.pid,
                    owner.host,
                    int(owner.started).unwrap_or(0),
                    expires,
                ])
            })
            .map_err(sqlite)?;
        Ok(())
    }

    fn claim(&mut self, run: &str, owner: &Owner, lease_ms: u64) -> Result<ClaimOut, Fail> {
        let now = self.clock.now_ms();
        let row = self
            .conn
            .prepare_cached(
                "SELECT lease_owner, lease_pid, lease_host, lease_started, lease_expires_at,
                    lease_token, next_seq, durability
                 FROM runs WHERE id = ?1",
            )
            .and_then(|mut s| {
                s.query_row([run], |r| {
                    Ok((
                        crate::read::owner_at(r, 0)?,
                        r.get::<_, Option<i64>>(4)?,
                        r.get::<_, i64>(5)?,
                        r.get::<_, i64>(6)?,
                        r.get::<_, String>(7)?,
                    ))
                })
                .optional()
            })
            .map_err(sqlite)?;
        let Some((holder, expires, token, next_seq, durability)) = row else {
            return Ok(ClaimOut::NotFound);
        };
        if let Some(holder) = holder
            && expires.is_some_and(|e| e > now)
            && !holder.is_dead()
        {
            return Ok(ClaimOut::HeldBy(holder));
        }
        let expires = now.saturating_add(int(lease_ms).unwrap_or(i64::MAX));
        self.conn
            .prepare_cached(
                "UPDATE runs SET lease_owner = ?2, lease_pid = ?3, lease_host = ?4,
                    lease_started = ?5, lease_expires_at = ?6, lease_token = lease_token + 1,
                    status = CASE status WHEN 'waiting' THEN 'running' ELSE status END
                 WHERE id = ?1",
            )
            .and_then(|mut s| {
                s.execute(params![
                    run,
                    owner.id,
                    owner.pid,
                    owner.host,
                    int(owner.started).unwrap_or(0),
                    expires,
                ])
            })
            .map_err(sqlite)?;
        Ok(ClaimOut::Claimed {
            token: u64::try_from(token).unwrap_or(0) + 1,
            next_seq: u64::try_from(next_seq).unwrap_or(0),
            durability: parse_durability(&durability),
        })
    }

    fn signal(&mut self, run: &str, name: &str, digest: &str) -> Result<u64, Fail> {
        if !self.exists(run)? {
            return Err(Fail::Command(StoreError::NotFound(run.to_string())));
        }
        let seq: i64 = self
            .conn
            .prepare_cached("SELECT COALESCE(MAX(seq) + 1, 0) FROM signals WHERE run = ?1")
            .and_then(|mut s| s.query_row([run], |r| r.get(0)))
            .map_err(sqlite)?;
        self.conn
            .prepare_cached(
                "INSERT INTO signals (run, seq, name, payload_digest, sent_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .and_then(|mut s| s.execute(params![run, seq, name, digest, self.clock.now_ms()]))
            .map_err(sqlite)?;
        self.conn
            // A signal's payload is one more value the run references (`writer::clean`).
            .prepare_cached("UPDATE runs SET signal_pending = 1, refs_kept = 0 WHERE id = ?1")
            .and_then(|mut s| s.execute([run]))
            .map_err(|e| Fail::Batch(sqlite(e)))?;
        Ok(u64::try_from(seq).unwrap_or(0))
    }
}

fn lease_lost(run: &str) -> StoreError {
    StoreError::LeaseLost {
        run: run.to_string(),
    }
}
