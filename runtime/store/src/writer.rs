//! The writer thread: the one connection that writes, committing queued commands in batches.
//!
//! Commands arrive on a bounded channel in the order callers enqueued them. The thread blocks
//! for the first, takes whatever else is queued (and, when nobody is waiting, lingers ~2 ms
//! for more), then runs them all in one `BEGIN IMMEDIATE` transaction and commits once before
//! answering anyone. A durable write nobody waits for lingers too: the engine appends a
//! call's start and then waits on a sync, and committing the append alone the moment it
//! arrives would cost a second fsync when the sync follows microseconds later.
//!
//! Failure handling: a command fails alone only before it has written anything. Every command
//! is built so that whatever can refuse it (the fence of an append, a missing run, …) is
//! checked by its first write statement, and a statement is atomic, so a refused command
//! leaves nothing behind: no SAVEPOINT is needed (they copied every touched page per command).
//! A refused command answers its error and poisons its run (nothing later is written for that
//! run under that lease, which keeps its journal free of gaps) while the others commit. A
//! failure after a command's first write, or one that takes the transaction with it (I/O, a
//! failed commit, a value that cannot be inserted), fails every command of the batch and
//! poisons every run that had data in it; the batch's values are kept and written with the
//! next batch, because their callers were already told they are stored and later rows may
//! refer to them.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::{Connection, ErrorCode, OptionalExtension, params};
use tokio::sync::oneshot;

use crate::api::{Durability, LogRow, NewRun, Owner, StoreError};
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
/// How often `BEGIN IMMEDIATE` is retried when another process keeps the write lock for
/// longer than the busy timeout; nothing has been written at that point, so waiting is safe.
const BEGIN_ATTEMPTS: u32 = 6;

/// Locks a mutex, going on when another thread panicked while holding it: every structure
/// behind these locks stays consistent between statements.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An SQLite failure as a store error.
pub(crate) fn sqlite(e: rusqlite::Error) -> StoreError {
    StoreError::Sqlite(e.to_string())
}

/// A number as SQLite stores it; values past `i64::MAX` cannot be stored.
pub(crate) fn int(n: u64) -> Result<i64, StoreError> {
    i64::try_from(n).map_err(|_| StoreError::Sqlite(format!("{n} is too large to store")))
}

/// A journal row ready to insert, its data already serialised by the caller.
pub(crate) struct Row {
    /// When it happened.
    pub(crate) at: i64,
    /// Its kind.
    pub(crate) kind: String,
    /// Its step.
    pub(crate) step: Option<String>,
    /// Its `foreach` index.
    pub(crate) index: Option<u32>,
    /// Its attempt.
    pub(crate) attempt: Option<u32>,
    /// The event's data as JSON text.
    pub(crate) data: String,
}

/// A run update with its JSON parts already serialised.
pub(crate) struct Update {
    /// A new status.
    pub(crate) status: Option<&'static str>,
    /// A new due time.
    pub(crate) due_at: Option<Option<i64>>,
    /// New signal names, as a JSON array.
    pub(crate) waiting_on: Option<String>,
    /// Recompute the pending-signal mark.
    pub(crate) clear_signal_pending: bool,
    /// The end time.
    pub(crate) ended_at: Option<i64>,
    /// The output's digest.
    pub(crate) output_digest: Option<String>,
    /// The error, as JSON.
    pub(crate) error: Option<String>,
}

/// A value's text as it waits to be committed.
#[derive(Clone)]
pub(crate) enum ValueText {
    /// Stored in the database row.
    Inline(Arc<str>),
    /// Already written to its blob file.
    External,
}

/// The first failed write of a run under one lease.
pub(crate) struct Poison {
    token: u64,
    first: StoreError,
}

impl Poison {
    /// What later writes of the run are told.
    pub(crate) fn error(&self, run: &str) -> StoreError {
        match &self.first {
            // A lost lease stays a lost lease: the engine gives the run up rather than failing it.
            StoreError::LeaseLost { .. } => StoreError::LeaseLost {
                run: run.to_string(),
            },
            first => StoreError::Poisoned {
                run: run.to_string(),
                message: first.to_string(),
            },
        }
    }
}

/// State shared by the callers and the writer thread.
#[derive(Default)]
pub(crate) struct Shared {
    /// Runs whose writes failed, by run id (for the lease token that failed).
    pub(crate) poison: Mutex<HashMap<String, Poison>>,
    /// Values enqueued but not committed yet, so they can be read back at once.
    pub(crate) pending: Mutex<HashMap<String, ValueText>>,
    /// Digests of values already written or enqueued by this store.
    pub(crate) seen: Mutex<HashSet<[u8; 32]>>,
    /// Transactions attempted.
    pub(crate) batches: AtomicU64,
    /// Commands processed.
    pub(crate) commands: AtomicU64,
    /// Transactions attempted at `synchronous=FULL`.
    pub(crate) full_syncs: AtomicU64,
    /// Test hook: fails the append of this run that starts at this sequence number.
    #[cfg(test)]
    pub(crate) fail_append: Mutex<Option<(String, u64)>>,
    /// Test hook: fails every batch at its commit, as a full disk would.
    #[cfg(test)]
    pub(crate) fail_commit: std::sync::atomic::AtomicBool,
}

impl Shared {
    /// The error a write for `run` under `token` gets, if the run is poisoned.
    pub(crate) fn poisoned(&self, run: &str, token: u64) -> Option<StoreError> {
        lock(&self.poison)
            .get(run)
            .filter(|p| p.token == token)
            .map(|p| p.error(run))
    }

    /// Records the first failure of `run` under `token`; later ones keep the first.
    pub(crate) fn poison(&self, run: &str, token: u64, error: StoreError) {
        let mut map = lock(&self.poison);
        match map.get(run) {
            Some(p) if p.token == token => {}
            _ => {
                map.insert(
                    run.to_string(),
                    Poison {
                        token,
                        first: error,
                    },
                );
            }
        }
    }
}

/// Which run and lease a command writes for.
pub(crate) struct Tag {
    /// The run.
    pub(crate) run: String,
    /// The lease's fencing token.
    pub(crate) token: u64,
    /// Whether the run's writes must reach the disk at commit.
    pub(crate) durable: bool,
}

/// What a claim found, before it becomes a [`crate::Claim`].
#[derive(Debug, PartialEq)]
pub(crate) enum ClaimOut {
    /// Taken, with this token, from this sequence number.
    Claimed {
        token: u64,
        next_seq: u64,
        durability: Durability,
    },
    /// A live process holds it.
    HeldBy(Owner),
    /// No such run.
    NotFound,
}

/// How a command failed.
enum Fail {
    /// Before it wrote anything: it fails alone.
    Command(StoreError),
    /// After it wrote something, or with the transaction: the batch fails.
    Batch(StoreError),
}

impl From<StoreError> for Fail {
    fn from(e: StoreError) -> Self {
        Fail::Command(e)
    }
}

/// A reply to a blocking caller.
pub(crate) type Reply<T> = SyncSender<Result<T, StoreError>>;

/// A write to make, in queue order.
pub(crate) enum Cmd {
    /// Store a value (idempotent: `INSERT OR IGNORE`).
    Value {
        digest: String,
        text: ValueText,
        size: i64,
    },
    /// Store a FlowSpec.
    Spec {
        digest: String,
        json: String,
        reply: Reply<()>,
    },
    /// Append journal rows starting at `first_seq`.
    Append {
        tag: Tag,
        first_seq: u64,
        rows: Vec<Row>,
    },
    /// Change the run's row.
    Update { tag: Tag, update: Update },
    /// Keep what a tool printed.
    Log { tag: Tag, log: LogRow },
    /// Mark a signal consumed.
    Consume { tag: Tag, seq: u64, by: u64 },
    /// Give the lease up.
    Release {
        tag: Tag,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    /// Answer once everything before it is committed.
    Sync {
        tag: Tag,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    /// Create a run leased to `owner`.
    Create {
        run: Box<NewRun>,
        rows: Vec<Row>,
        owner: Owner,
        lease_ms: u64,
        reply: Reply<()>,
    },
    /// Take a run's lease.
    Claim {
        run: String,
        owner: Owner,
        lease_ms: u64,
        out: ClaimOut,
        reply: Reply<ClaimOut>,
    },
    /// Extend a lease.
    Renew {
        tag: Tag,
        lease_ms: u64,
        reply: Reply<()>,
    },
    /// Record a signal.
    Signal {
        run: String,
        name: String,
        digest: String,
        seq: u64,
        reply: Reply<u64>,
    },
    /// Ask a run to stop.
    Cancel {
        run: String,
        done: bool,
        reply: Reply<bool>,
    },
}

impl Cmd {
    /// The run and lease of a command that writes a run's data (and so poisons it on failure).
    fn data_tag(&self) -> Option<&Tag> {
        match self {
            Cmd::Append { tag, .. }
            | Cmd::Update { tag, .. }
            | Cmd::Log { tag, .. }
            | Cmd::Consume { tag, .. }
            | Cmd::Release { tag, .. } => Some(tag),
            _ => None,
        }
    }

    fn durable(&self) -> bool {
        match self {
            Cmd::Append { tag, .. }
            | Cmd::Update { tag, .. }
            | Cmd::Log { tag, .. }
            | Cmd::Consume { tag, .. }
            | Cmd::Release { tag, .. }
            | Cmd::Sync { tag, .. }
            | Cmd::Renew { tag, .. } => tag.durable,
            Cmd::Create { run, .. } => run.durability == Durability::Durable,
            // Signals and cancellations come from people, who expect them kept.
            Cmd::Signal { .. } | Cmd::Cancel { .. } => true,
            Cmd::Value { .. } | Cmd::Spec { .. } | Cmd::Claim { .. } => false,
        }
    }

    /// Whether someone waits for this command (so the batch should not linger).
    fn awaited(&self) -> bool {
        !matches!(
            self,
            Cmd::Value { .. }
                | Cmd::Append { .. }
                | Cmd::Update { .. }
                | Cmd::Log { .. }
                | Cmd::Consume { .. }
        )
    }

    /// Roughly how many bytes it adds to a transaction.
    fn weight(&self) -> usize {
        match self {
            Cmd::Value {
                text: ValueText::Inline(t),
                ..
            } => t.len() + 96,
            Cmd::Spec { json, .. } => json.len() + 96,
            Cmd::Append { rows, .. } => rows.iter().map(|r| r.data.len() + r.kind.len() + 64).sum(),
            Cmd::Log { log, .. } => log.text.len() + 64,
            _ => 128,
        }
    }

    /// Sends the command's outcome to whoever waits for it.
    fn answer(self, result: Result<(), StoreError>) {
        // A caller that stopped waiting is no reason to stop: send errors are ignored.
        match self {
            Cmd::Spec { reply, .. } | Cmd::Create { reply, .. } | Cmd::Renew { reply, .. } => {
                let _ = reply.send(result);
            }
            Cmd::Release { reply, .. } | Cmd::Sync { reply, .. } => {
                let _ = reply.send(result);
            }
            Cmd::Claim { out, reply, .. } => {
                let _ = reply.send(result.map(|()| out));
            }
            Cmd::Signal { seq, reply, .. } => {
                let _ = reply.send(result.map(|()| seq));
            }
            Cmd::Cancel { done, reply, .. } => {
                let _ = reply.send(result.map(|()| done));
            }
            Cmd::Value { .. }
            | Cmd::Append { .. }
            | Cmd::Update { .. }
            | Cmd::Log { .. }
            | Cmd::Consume { .. } => {}
        }
    }
}

/// Starts the writer thread on `conn`.
pub(crate) fn spawn(
    conn: Connection,
    rx: Receiver<Cmd>,
    shared: Arc<Shared>,
    checkpointer: Checkpointer,
    clock: Arc<dyn Clock>,
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
                clock,
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

struct Writer {
    conn: Connection,
    rx: Receiver<Cmd>,
    shared: Arc<Shared>,
    /// Values from a failed batch, written first in the next one.
    carry: Vec<Cmd>,
    /// Whether the connection is at `synchronous=FULL` (else NORMAL).
    full_sync: bool,
    /// Copies the WAL back into the database in the background.
    checkpointer: Checkpointer,
    /// Commits since the WAL's size was last looked at.
    commits: u32,
    /// Lease expiries and signal times (wall-clock by nature: they are compared across
    /// processes), from the clock the store was opened with.
    clock: Arc<dyn Clock>,
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
                self.after_commit();
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

    fn after_commit(&mut self) {
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
        for cmd in batch.iter_mut() {
            match self.step(cmd) {
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

    /// Runs one command: `Ok(outcome)` for the command alone, `Err` when the transaction is
    /// lost and the batch fails.
    fn step(&mut self, cmd: &mut Cmd) -> Result<Result<(), StoreError>, StoreError> {
        match cmd {
            Cmd::Value { digest, text, size } => {
                let json = match text {
                    ValueText::Inline(t) => Some(&**t),
                    ValueText::External => None,
                };
                self.conn
                    .prepare_cached(
                        "INSERT OR IGNORE INTO vals (digest, json, size, external)
                         VALUES (?1, ?2, ?3, ?4)",
                    )
                    .and_then(|mut s| s.execute(params![&*digest, json, *size, json.is_none()]))
                    .map_err(sqlite)?;
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
    fn exec(&mut self, cmd: &mut Cmd) -> Result<(), Fail> {
        match cmd {
            Cmd::Value { .. } | Cmd::Sync { .. } => Ok(()),
            Cmd::Spec { digest, json, .. } => {
                self.conn
                    .prepare_cached("INSERT OR IGNORE INTO specs (digest, json) VALUES (?1, ?2)")
                    .and_then(|mut s| s.execute(params![&*digest, &*json]))
                    .map_err(sqlite)?;
                Ok(())
            }
            Cmd::Append {
                tag,
                first_seq,
                rows,
            } => self.append(tag, *first_seq, rows),
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
                if rows.is_empty() {
                    Ok(())
                } else {
                    self.append(&tag, 0, rows)
                }
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
                digest,
                seq,
                ..
            } => {
                *seq = self.signal(run, name, digest)?;
                Ok(())
            }
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
        if lock(&self.shared.fail_append)
            .as_ref()
            .is_some_and(|(run, seq)| *run == tag.run && *seq == first_seq)
        {
            return Err(Fail::Command(StoreError::Sqlite(
                "injected failure".to_string(),
            )));
        }
        let next = first_seq + rows.len() as u64;
        // Fencing and continuity in one statement: the lease must still be ours and the
        // journal must end exactly where this append starts.
        let changed = self
            .conn
            .prepare_cached(
                "UPDATE runs SET next_seq = ?1 WHERE id = ?2 AND lease_token = ?3 AND next_seq = ?4",
            )
            .and_then(|mut s| {
                s.execute(params![
                    int(next).unwrap_or(-1),
                    tag.run,
                    int(tag.token).unwrap_or(-1),
                    int(first_seq).unwrap_or(-1),
                ])
            })
            .map_err(sqlite)?;
        if changed == 0 {
            return Err(Fail::Command(self.why_not(&tag.run, tag.token, |found| {
                StoreError::Continuity {
                    run: tag.run.clone(),
                    expected: first_seq,
                    found,
                }
            })));
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
                    error = COALESCE(?10, error)
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
            .prepare_cached("UPDATE runs SET signal_pending = 1 WHERE id = ?1")
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

/// The stored word for a durability.
pub(crate) fn durability_str(d: Durability) -> &'static str {
    match d {
        Durability::Fast => "fast",
        Durability::Durable => "durable",
    }
}

/// A stored durability word (the schema allows only the two).
pub(crate) fn parse_durability(s: &str) -> Durability {
    if s == "durable" {
        Durability::Durable
    } else {
        Durability::Fast
    }
}
