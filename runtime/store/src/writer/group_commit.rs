//! The writer thread's loop: it gathers a batch (lingering for company when nobody waits),
//! runs it in one `BEGIN IMMEDIATE` transaction at the durability its commands ask for,
//! commits once and answers every command; a failed batch poisons its runs and carries its
//! values over to the next one.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::{Connection, ErrorCode};

use super::command::{Cmd, Fail};
use super::{Shared, lock, sqlite};
use crate::api::StoreError;
use crate::checkpoint::Checkpointer;
use crate::clock::Clock;

/// How many commands may wait in the channel before callers block.
pub(crate) const CHANNEL_CAPACITY: usize = 4096;
/// At most this many commands go into one transaction.
const MAX_BATCH_COMMANDS: usize = 8192;
/// At most about this many bytes go into one transaction.
const MAX_BATCH_BYTES: usize = 8 << 20;
/// How long a batch of only fast, unawaited writes waits for company.
const LINGER: Duration = Duration::from_millis(2);
/// How many commits go by between two looks at the WAL's size.
const WAL_CHECK_EVERY: u32 = 64;
/// How many durable commits go by before the writer checkpoints the WAL itself, so that the
/// next commit starts the WAL over from its beginning (see [`Writer::restart_wal`]).
pub(crate) const RESTART_EVERY: u32 = 256;
/// How often `BEGIN IMMEDIATE` is retried when another process keeps the write lock for
/// longer than the busy timeout; nothing has been written at that point, so waiting is safe.
const BEGIN_ATTEMPTS: u32 = 6;

/// Starts the writer thread on `conn`.
pub(crate) fn spawn(
    conn: Connection,
    rx: Receiver<Cmd>,
    shared: Arc<Shared>,
    checkpointer: Checkpointer,
    clock: Arc<dyn Clock>,
    blobs: PathBuf,
) -> std::io::Result<JoinHandle<()>> {
    if checkpointer.is_running() {
        // Should this fail, SQLite keeps checkpointing in line: slower, equally correct.
        let _ = conn.execute_batch("PRAGMA wal_autocheckpoint = 0");
    }
    std::thread::Builder::new()
        .name("reel-store-writer".to_string())
        .spawn(move || {
            Writer {
                conn,
                rx,
                shared,
                carry: Vec::new(),
                full_sync: false,
                checkpointer,
                commits: 0,
                durable_commits: 0,
                clock,
                values_removed: None,
                blobs,
            }
            .run()
        })
}

/// How full a batch being gathered is.
struct Fill {
    bytes: usize,
    /// Someone waits for a command in it: no lingering.
    urgent: bool,
}

impl Fill {
    fn add(&mut self, cmd: Cmd, batch: &mut Vec<Cmd>) {
        self.bytes += cmd.weight();
        self.urgent |= cmd.awaited();
        batch.push(cmd);
    }

    fn full(&self, batch: &[Cmd]) -> bool {
        batch.len() >= MAX_BATCH_COMMANDS || self.bytes >= MAX_BATCH_BYTES
    }
}

/// The writer thread's state: its connection, its queue and what it carries between batches.
pub(super) struct Writer {
    pub(super) conn: Connection,
    rx: Receiver<Cmd>,
    pub(super) shared: Arc<Shared>,
    /// Values from a failed batch, written first in the next one.
    carry: Vec<Cmd>,
    /// Whether the connection is at `synchronous=FULL` (else NORMAL).
    full_sync: bool,
    /// Copies the WAL back into the database in the background.
    checkpointer: Checkpointer,
    /// Commits since the WAL's size was last looked at.
    commits: u32,
    /// Durable commits since the writer last had the WAL wholly checkpointed.
    durable_commits: u32,
    /// Lease expiries and signal times (wall-clock by nature: they are compared across
    /// processes), from the clock the store was opened with.
    pub(super) clock: Arc<dyn Clock>,
    /// How many cleans had removed values when this writer last looked (see
    /// [`Writer::notice_removed_values`]).
    pub(super) values_removed: Option<i64>,
    /// Where values kept apart from the database live.
    pub(super) blobs: PathBuf,
}

impl Writer {
    fn run(mut self) {
        let mut batch = Vec::new();
        while let Ok(first) = self.rx.recv() {
            self.gather(first, &mut batch);
            self.commit(&mut batch);
        }
        // Every sender is gone; values a failed batch left behind get one last try.
        if !self.carry.is_empty() {
            let mut last = std::mem::take(&mut self.carry);
            self.commit(&mut last);
        }
    }

    /// Fills a batch: what failed last time, the first command, whatever is queued, and, when
    /// nobody waits, what arrives within [`LINGER`].
    fn gather(&mut self, first: Cmd, batch: &mut Vec<Cmd>) {
        batch.append(&mut self.carry);
        let mut fill = Fill {
            bytes: batch.iter().map(Cmd::weight).sum(),
            urgent: false,
        };
        fill.add(first, batch);
        while !fill.full(batch) {
            match self.rx.try_recv() {
                Ok(cmd) => fill.add(cmd, batch),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        // edge: the linger is I/O timing (how long a batch waits for company before its
        // commit), not a decision: it changes when rows land, never what is written, so it
        // reads the monotonic clock rather than the clock the store was handed.
        #[allow(clippy::disallowed_methods)]
        let deadline = Instant::now() + LINGER;
        while !fill.urgent && !fill.full(batch) {
            #[allow(clippy::disallowed_methods)]
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match self.rx.recv_timeout(left) {
                Ok(cmd) => fill.add(cmd, batch),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }
    }

    /// Writes a batch in one transaction and answers every command in it.
    fn commit(&mut self, batch: &mut Vec<Cmd>) {
        let durable = batch.iter().any(Cmd::durable);
        let mut results = Vec::with_capacity(batch.len());
        let outcome = self.write(batch, durable, &mut results);
        self.shared.batches.fetch_add(1, Ordering::Relaxed);
        // A sync alone writes nothing, so its commit has nothing to flush to the disk.
        if batch
            .iter()
            .any(|c| c.durable() && !matches!(c, Cmd::Sync { .. }))
        {
            self.shared.full_syncs.fetch_add(1, Ordering::Relaxed);
        }
        self.shared
            .commands
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        match outcome {
            Ok(()) => {
                if cfg!(debug_assertions) && batch.iter().any(Cmd::journals) {
                    crate::crash::reached(crate::crash::CrashPoint::AfterCommit);
                }
                self.after_commit(durable);
                {
                    let mut pending = lock(&self.shared.pending);
                    for cmd in batch.iter() {
                        if let Cmd::Value { digest, .. } = cmd {
                            pending.remove(digest);
                        }
                    }
                }
                for (cmd, result) in batch.drain(..).zip(results) {
                    cmd.answer(result);
                }
            }
            Err(error) => {
                for cmd in batch.drain(..) {
                    if let Some(tag) = cmd.data_tag() {
                        self.shared.poison(&tag.run, tag.token, error.clone());
                    }
                    match cmd {
                        Cmd::Value { .. } => self.carry.push(cmd),
                        Cmd::Sync { ref tag, .. } | Cmd::Release { ref tag, .. } => {
                            // A run that lost writes reports it as it does for later writes.
                            let error = self
                                .shared
                                .poisoned(&tag.run, tag.token)
                                .unwrap_or_else(|| error.clone());
                            cmd.answer(Err(error));
                        }
                        cmd => cmd.answer(Err(error.clone())),
                    }
                }
            }
        }
    }

    fn after_commit(&mut self, durable: bool) {
        if durable {
            self.restart_wal();
        }
        self.checkpointer.nudge();
        self.commits += 1;
        if self.commits >= WAL_CHECK_EVERY {
            self.commits = 0;
            if self.checkpointer.is_running() && self.checkpointer.wal_too_large() {
                // Fails only when readers hold old snapshots; the next look tries again.
                let _ = self
                    .conn
                    .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
            }
        }
    }

    /// Every [`RESTART_EVERY`] durable commits, checkpoints the WAL on the writer's own
    /// connection, between two of its transactions, so that every frame is copied back and the
    /// next commit starts the WAL over at its beginning (SQLite restarts the WAL only when a
    /// write transaction begins with nothing left to copy back, which the background
    /// checkpointer never sees while commits follow each other). A durable commit then
    /// overwrites blocks the WAL file already has, rather than growing the file, so its sync
    /// need not also write the file's new size to the filesystem's journal. Fast commits are
    /// not synced, so they leave the background checkpointer alone. A checkpoint that cannot
    /// copy everything (a reader holds an old snapshot, the background one is mid-copy) is
    /// tried again 16 durable commits later.
    fn restart_wal(&mut self) {
        self.durable_commits += 1;
        if self.durable_commits < RESTART_EVERY {
            return;
        }
        // (busy, frames in the WAL, frames checkpointed)
        let done = self
            .conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            })
            .is_ok_and(|(busy, log, copied)| busy == 0 && log == copied);
        // A checkpoint that could not copy everything (a reader holds an old snapshot) is
        // tried again a few commits later rather than at every commit.
        self.durable_commits = if done { 0 } else { RESTART_EVERY - 16 };
    }

    /// Runs the batch's commands in one transaction. The outer error fails the whole batch;
    /// each command's own outcome goes to `results`.
    fn write(
        &mut self,
        batch: &mut [Cmd],
        durable: bool,
        results: &mut Vec<Result<(), StoreError>>,
    ) -> Result<(), StoreError> {
        if durable != self.full_sync {
            let pragma = if durable {
                "PRAGMA synchronous = FULL"
            } else {
                "PRAGMA synchronous = NORMAL"
            };
            self.conn.execute_batch(pragma).map_err(sqlite)?;
            self.full_sync = durable;
        }
        self.begin()?;
        if let Err(e) = self.notice_removed_values() {
            self.rollback();
            return Err(e);
        }
        #[cfg(debug_assertions)]
        let refused = self.shared.fault.get().and_then(|f| f.refused(batch));
        for (_i, cmd) in batch.iter_mut().enumerate() {
            #[cfg(debug_assertions)]
            if refused == Some(_i) {
                let e = StoreError::Sqlite("the write was refused (an injected fault)".into());
                if let Some(tag) = cmd.data_tag() {
                    self.shared.poison(&tag.run, tag.token, e.clone());
                }
                results.push(Err(e));
                continue;
            }
            match self.run_in_batch(cmd) {
                Ok(result) => results.push(result),
                Err(fatal) => {
                    self.rollback();
                    return Err(fatal);
                }
            }
        }
        #[cfg(test)]
        if self.shared.fail_commit.load(Ordering::SeqCst) {
            self.rollback();
            return Err(StoreError::Sqlite("injected commit failure".to_string()));
        }
        #[cfg(debug_assertions)]
        if let Some(e) = self.shared.fault.get().and_then(|f| f.at_commit(batch)) {
            self.rollback();
            return Err(sqlite(e));
        }
        if cfg!(debug_assertions) && batch.iter().any(Cmd::journals) {
            crate::crash::reached(crate::crash::CrashPoint::BeforeCommit);
        }
        if let Err(e) = self.simple("COMMIT") {
            self.rollback();
            return Err(e);
        }
        Ok(())
    }

    fn simple(&self, sql: &str) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(sql)
            .and_then(|mut s| s.execute([]))
            .map(|_| ())
            .map_err(sqlite)
    }

    fn begin(&self) -> Result<(), StoreError> {
        let mut attempt = 1;
        loop {
            match self
                .conn
                .prepare_cached("BEGIN IMMEDIATE")
                .and_then(|mut s| s.execute([]))
            {
                Ok(_) => return Ok(()),
                Err(e)
                    if e.sqlite_error_code() == Some(ErrorCode::DatabaseBusy)
                        && attempt < BEGIN_ATTEMPTS =>
                {
                    attempt += 1;
                }
                Err(e) => return Err(sqlite(e)),
            }
        }
    }

    fn rollback(&self) {
        if !self.conn.is_autocommit() {
            // If even the rollback fails SQLite rolls back on its own when the connection next
            // starts a transaction; nothing of this one was committed either way.
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }

    /// Runs one command of the batch, unless its run is poisoned, and sorts its failure:
    /// `Ok(outcome)` for the command alone (a refusal poisons its run), `Err` when the
    /// transaction is lost and the batch fails.
    fn run_in_batch(&mut self, cmd: &mut Cmd) -> Result<Result<(), StoreError>, StoreError> {
        match cmd {
            Cmd::Value { digest, text, size } => {
                // A value that cannot be inserted takes the batch with it: its caller was
                // already told it is stored.
                self.put_value(digest, text, *size)?;
                return Ok(Ok(()));
            }
            Cmd::Sync { tag, .. } => {
                return Ok(match self.shared.poisoned(&tag.run, tag.token) {
                    Some(e) => Err(e),
                    None => Ok(()),
                });
            }
            _ => {}
        }
        let poisoned = cmd
            .data_tag()
            .and_then(|tag| self.shared.poisoned(&tag.run, tag.token));
        if let Some(e) = &poisoned {
            // Giving the lease up is still right (another process may take the run over);
            // every other write of a poisoned run is dropped so its journal has no gap.
            if !matches!(cmd, Cmd::Release { .. }) {
                return Ok(Err(e.clone()));
            }
        }
        match self.exec(cmd) {
            Ok(()) => Ok(poisoned.map_or(Ok(()), Err)),
            Err(Fail::Batch(e)) => Err(e),
            // SQLite may have rolled the whole transaction back (I/O error, disk full, …).
            Err(Fail::Command(e)) if self.conn.is_autocommit() => Err(e),
            Err(Fail::Command(e)) => {
                if let Some(tag) = cmd.data_tag() {
                    self.shared.poison(&tag.run, tag.token, e.clone());
                }
                Ok(Err(e))
            }
        }
    }
}
