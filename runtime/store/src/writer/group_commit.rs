//! The writer's loop: whoever commits next (the writer thread, or a caller waiting for its own
//! command, see [`Queue::lead`]) gathers what is queued, runs it in one `BEGIN IMMEDIATE`
//! transaction at the durability its commands ask for, commits once and answers every command;
//! a failed batch poisons its runs and carries its values over to the next one.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc::TryRecvError;
use std::sync::{Arc, Condvar, Mutex, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::{Connection, ErrorCode};

use super::command::{Cmd, Fail};
use super::queue::{self, Receiver, Sender};
use super::{Shared, lock, sqlite};
use crate::api::StoreError;
use crate::checkpoint::{Checkpointer, Truncated};
use crate::clock::Clock;

/// How many commands may wait in the channel before callers block.
const CHANNEL_CAPACITY: usize = 4096;
/// At most this many commands go into one transaction.
const MAX_BATCH_COMMANDS: usize = 8192;
/// At most about this many bytes go into one transaction.
pub(super) const MAX_BATCH_BYTES: usize = 8 << 20;
/// How long writes nobody waits for wait for company before the writer thread commits them.
const LINGER: Duration = Duration::from_millis(2);
/// How many durable commits go by before the writer checkpoints the WAL itself, so that the
/// next commit starts the WAL over from its beginning (see [`Writer::restart_wal`]).
pub(crate) const RESTART_EVERY: u32 = 256;
/// How often `BEGIN IMMEDIATE` is retried when another process keeps the write lock for
/// longer than the busy timeout; nothing has been written at that point, so waiting is safe.
const BEGIN_ATTEMPTS: u32 = 6;

/// Starts the writer thread on `conn`; the [`Queue`] is how callers reach it.
pub(crate) fn spawn(
    mut conn: Connection,
    shared: Arc<Shared>,
    mut checkpointer: Checkpointer,
    clock: Arc<dyn Clock>,
    blobs: PathBuf,
) -> std::io::Result<(Queue, JoinHandle<()>)> {
    if checkpointer.is_running() {
        // Should this fail, SQLite keeps checkpointing in line: slower, equally correct.
        if conn.execute_batch("PRAGMA wal_autocheckpoint = 0").is_ok() {
            // Without the count the WAL is never truncated by the writer, only restarted by
            // the background checkpoints when they catch its end.
            let _ = checkpointer.watch(&mut conn);
        }
    }
    let (tx, rx) = queue::channel(CHANNEL_CAPACITY);
    let committer = Arc::new(Committer {
        writer: Mutex::new(Writer {
            conn,
            rx,
            shared,
            carry: Vec::new(),
            appended: Vec::new(),
            full_sync: false,
            checkpointer,
            truncate_pause: 0,
            durable_commits: 0,
            clock,
            values_removed: None,
            blobs,
        }),
        bell: Bell::default(),
    });
    let thread = Arc::clone(&committer);
    let handle = std::thread::Builder::new()
        .name("reel-store-writer".to_string())
        .spawn(move || serve(&thread))?;
    Ok((
        Queue {
            tx: Some(tx),
            committer,
        },
        handle,
    ))
}

/// The writer's state and the bell that calls its thread. Whichever thread holds the writer
/// commits next: the writer thread when rung, or a caller that waits for its own command and
/// finds the writer free (no hand-off to another thread and back: on a busy machine each
/// wake-up of a sleeping thread costs tens of microseconds, which was most of a durable
/// step's time beside its fsync).
struct Committer {
    writer: Mutex<Writer>,
    bell: Bell,
}

/// How soon the writer thread is wanted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
enum Ring {
    /// Nothing queued that no committer has taken.
    #[default]
    None,
    /// Writes nobody waits for: commit them within [`LINGER`], with whatever joins them.
    Soon,
    /// Someone waits (and could not commit it themselves), or the queue is full: at once.
    Now,
}

#[derive(Default)]
struct BellState {
    ring: Ring,
    /// The writer thread waits with no deadline (any ring must wake it).
    idle: bool,
    /// The writer thread waits out a linger (only [`Ring::Now`] must wake it).
    lingering: bool,
    /// Rung since the linger began: while writes keep coming (and callers commit them
    /// themselves), the thread lingers on rather than sleeping until the next write wakes it.
    rung: bool,
    /// The store is closed: the writer thread commits what is left and stops.
    closed: bool,
}

/// How callers call the writer thread. Every command rings it after joining the queue, and
/// every committer takes the ring before it gathers, so no command is left queued with no
/// ring for it. It wakes the thread only when that changes what the thread does: not for each
/// write while it lingers.
#[derive(Default)]
struct Bell {
    state: Mutex<BellState>,
    wake: Condvar,
}

impl Bell {
    fn ring(&self, ring: Ring) {
        let mut s = lock(&self.state);
        if ring <= s.ring {
            return;
        }
        s.ring = ring;
        s.rung = true;
        if s.idle || (s.lingering && ring == Ring::Now) {
            self.wake.notify_one();
        }
    }

    fn close(&self) {
        lock(&self.state).closed = true;
        self.wake.notify_one();
    }

    /// Called by a committer before it gathers: what is queued now is its to commit.
    fn take(&self) {
        lock(&self.state).ring = Ring::None;
    }

    /// The writer thread waits until it is rung [`Ring::Now`], or for [`LINGER`] once rung
    /// [`Ring::Soon`], or until the store closes. A linger at whose end another committer
    /// had taken the ring begins again if the bell rang during it, else the thread sleeps
    /// until rung.
    fn wait(&self) {
        let mut s = lock(&self.state);
        loop {
            if s.closed || s.ring == Ring::Now {
                return;
            }
            if s.ring == Ring::None {
                s.idle = true;
                s = self.wake.wait(s).unwrap_or_else(|e| e.into_inner());
                s.idle = false;
                continue;
            }
            // edge: the linger is I/O timing (how long writes wait for company before their
            // commit), not a decision: it changes when rows land, never what is written, so it
            // reads the monotonic clock rather than the clock the store was handed.
            #[allow(clippy::disallowed_methods)]
            let mut deadline = Instant::now() + LINGER;
            s.rung = false;
            loop {
                if s.closed || s.ring == Ring::Now {
                    return;
                }
                #[allow(clippy::disallowed_methods)]
                let now = Instant::now();
                let left = deadline.saturating_duration_since(now);
                if left.is_zero() {
                    if s.ring == Ring::Soon {
                        return;
                    }
                    if !s.rung {
                        break;
                    }
                    s.rung = false;
                    deadline = now + LINGER;
                    continue;
                }
                s.lingering = true;
                s = match self.wake.wait_timeout(s, left) {
                    Ok((s, _)) => s,
                    Err(e) => e.into_inner().0,
                };
                s.lingering = false;
            }
        }
    }
}

/// The writer thread: waits to be rung, then commits everything queued.
fn serve(committer: &Committer) {
    let mut batch = Vec::new();
    loop {
        committer.bell.wait();
        let mut writer = match committer.writer.lock() {
            Ok(writer) => writer,
            Err(e) => return e.into_inner().close(),
        };
        committer.bell.take();
        loop {
            match writer.gather(&mut batch) {
                Gathered::More => {
                    writer.commit(&mut batch);
                }
                Gathered::Empty => {
                    if batch.is_empty() || writer.commit(&mut batch) {
                        break;
                    }
                    // What was queued during a commit of writes nobody waits for goes next,
                    // at once: it had its company's time while that commit ran, and a linger
                    // now would leave the writer idle behind a caller that writes faster than
                    // one batch commits (a 1,000-step `reel run` had its last writes committed
                    // 6–10 ms after its last step, bench/README.md, session 26). After a
                    // durable commit the writer waits as before, so a durable step's own sync
                    // commits its start (see `Queue::lead`).
                    committer.bell.take();
                }
                Gathered::Closed => {
                    if !batch.is_empty() {
                        writer.commit(&mut batch);
                    }
                    // Every sender is gone; values a failed batch left behind get one last try.
                    if !writer.carry.is_empty() {
                        let mut last = std::mem::take(&mut writer.carry);
                        writer.commit(&mut last);
                    }
                    let writer = &mut *writer;
                    writer.checkpointer.finish(&writer.conn);
                    return;
                }
            }
        }
    }
}

/// The callers' end of the writer: the queue, and the writer itself for a caller that commits
/// its own command. Dropping it closes the queue; the writer thread then commits what is left
/// and stops.
pub(crate) struct Queue {
    tx: Option<Sender>,
    committer: Arc<Committer>,
}

impl Queue {
    /// Enqueues a command, waiting while the queue is full (backpressure: nothing is dropped).
    pub(crate) fn send(&self, cmd: Cmd) -> Result<(), StoreError> {
        let tx = self.tx.as_ref().ok_or(StoreError::Closed)?;
        tx.send(cmd, || self.committer.bell.ring(Ring::Now))?;
        self.committer.bell.ring(Ring::Soon);
        Ok(())
    }

    /// Commits on this thread, for a caller that enqueued a command and waits for it, until
    /// `answered` says the command has its answer, when no one else is committing; else rings
    /// the writer thread to come at once (which also keeps group commit when several runs
    /// write together: what they queue while one commits goes into the next batch together).
    /// The caller blocks for the commit, as it would have waiting for its answer.
    /// `answered` gives the answer once it is there; `None` back means the caller still waits
    /// for it.
    pub(crate) fn lead<R>(&self, mut answered: impl FnMut() -> Option<R>) -> Option<R> {
        let mut writer = match self.committer.writer.try_lock() {
            Ok(writer) => writer,
            Err(TryLockError::Poisoned(e)) => {
                e.into_inner().close();
                return None;
            }
            Err(TryLockError::WouldBlock) => {
                self.committer.bell.ring(Ring::Now);
                return None;
            }
        };
        let mut batch = Vec::new();
        // Whether a full batch may have left commands queued whose ring this thread took.
        let mut left = false;
        let mut answer = answered();
        while answer.is_none() {
            self.committer.bell.take();
            let gathered = writer.gather(&mut batch);
            if batch.is_empty() {
                // Nothing queued and no answer yet: only a closed queue does that, and the
                // writer thread answers what is left.
                left = true;
                break;
            }
            writer.commit(&mut batch);
            writer.shared.led.fetch_add(1, Ordering::Relaxed);
            left = gathered == Gathered::More;
            answer = answered();
        }
        drop(writer);
        if left {
            self.committer.bell.ring(Ring::Now);
        }
        answer
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        // The sender goes first, so the writer thread, once rung, finds the queue closed.
        self.tx.take();
        self.committer.bell.close();
    }
}

/// How a gathering ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gathered {
    /// The batch is full; more may be queued.
    More,
    /// The queue is empty.
    Empty,
    /// The queue is empty and every sender is gone.
    Closed,
}

/// How full a batch being gathered is.
struct Fill {
    bytes: usize,
}

impl Fill {
    fn add(&mut self, cmd: Cmd, batch: &mut Vec<Cmd>) {
        self.bytes += cmd.weight();
        batch.push(cmd);
    }

    fn full(&self, batch: &[Cmd]) -> bool {
        batch.len() >= MAX_BATCH_COMMANDS || self.bytes >= MAX_BATCH_BYTES
    }
}

/// The writer thread's state: its connection, its queue and what it carries between batches.
pub(super) struct Writer {
    pub(super) conn: Connection,
    rx: Receiver,
    pub(super) shared: Arc<Shared>,
    /// Values from a failed batch, written first in the next one.
    carry: Vec<Cmd>,
    /// Whether the connection is at `synchronous=FULL` (else NORMAL).
    full_sync: bool,
    /// Copies the WAL back into the database in the background.
    checkpointer: Checkpointer,
    /// Commits to go before the writer tries again to truncate a WAL grown too long.
    truncate_pause: u32,
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
    /// Runs whose journal this batch appended to, with the lease it checked and where the
    /// journal now ends; `runs.next_seq` is written once per run at the batch's end (see
    /// [`Writer::append`]).
    pub(super) appended: Vec<Appended>,
}

/// A run the batch being written appended to: the append that checked its fence, and the
/// appends after it under the same lease, each starting where the one before ended.
pub(super) struct Appended {
    pub(super) run: String,
    pub(super) token: u64,
    /// Where the journal ends in `runs.next_seq`.
    pub(super) stored: u64,
    /// Where it ends with this batch's appends.
    pub(super) next: u64,
}

impl Writer {
    /// Closes the queue after a committer panicked holding the writer (a bug): its batch was
    /// neither committed nor answered, so nothing more is written, as when the writer thread
    /// died with it before: queued commands are dropped (their callers get
    /// [`StoreError::Closed`]) and later sends fail.
    fn close(&mut self) {
        let (_, closed) = queue::channel(0);
        drop(std::mem::replace(&mut self.rx, closed));
    }

    /// Fills a batch with what is queued, up to a full batch; values a failed batch left
    /// behind go first, when anything new comes with them.
    fn gather(&mut self, batch: &mut Vec<Cmd>) -> Gathered {
        let mut fill = Fill {
            bytes: self.carry.iter().map(Cmd::weight).sum(),
        };
        let carried = self.carry.len();
        batch.append(&mut self.carry);
        let gathered = loop {
            if fill.full(batch) {
                break Gathered::More;
            }
            match self.rx.try_recv() {
                Ok(cmd) => fill.add(cmd, batch),
                Err(TryRecvError::Empty) => break Gathered::Empty,
                Err(TryRecvError::Disconnected) => break Gathered::Closed,
            }
        };
        if batch.len() == carried {
            // Nothing new: the carried values wait for the next command.
            self.carry.append(batch);
        }
        gathered
    }

    /// Writes a batch in one transaction and answers every command in it; `true` when the
    /// batch was durable.
    fn commit(&mut self, batch: &mut Vec<Cmd>) -> bool {
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
        durable
    }

    fn after_commit(&mut self, durable: bool) {
        if durable {
            self.restart_wal();
        }
        self.checkpointer.nudge();
        if self.truncate_pause > 0 {
            self.truncate_pause -= 1;
        } else if self.checkpointer.truncate_if_too_long(&self.conn) == Some(Truncated::Held) {
            self.truncate_pause = crate::checkpoint::TRUNCATE_RETRY_AFTER;
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
        self.appended.clear();
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
        if let Err(e) = self.store_journal_ends(None) {
            self.rollback();
            return Err(e);
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
            Cmd::Append { .. } => {}
            // Anything else may read or change a run's lease or journal end: it finds them
            // stored.
            _ => self.store_journal_ends(None)?,
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
