//! [`SqliteStore`]: the embedded store, one SQLite database in WAL mode plus blob files.
//!
//! Blocking calls (`create_run`, `claim_run`, `renew`, `put_spec`, `send_signal`,
//! `request_cancel`) enqueue a command and wait for its commit, typically well under a
//! millisecond in `Fast` mode and one fsync in `Durable` mode. They never use tokio's
//! `block_on`, so they are safe to call from inside a runtime; async code should call them via
//! `spawn_blocking` or accept the brief block. `sync` and `release` also commit their command
//! on the caller's thread when the writer is free (see `writer::Queue::lead`), so they too may
//! block the caller for a commit; their ticket is then already answered. Every enqueueing call
//! may also block while the writer's queue is full (backpressure: nothing is dropped).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use reel_flowspec::FlowSpec;
use reel_flowspec::canonical::{canonical_json, sha256_hex};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::api::{
    Claim, CleanScope, Cleaned, Durability, EventRow, Flow, JournalRow, Kept, Lease, LogRow,
    NewEvent, NewRun, Owner, RawJournalRow, RunFilter, RunRow, RunUpdate, SignalRow, Store,
    StoreError, StoreRead, Ticket,
};
use crate::blobs::{self, INLINE_MAX};
use crate::checkpoint::Checkpointer;
use crate::clock::Clock;
use crate::private;
use crate::read::{self, Readers};
use crate::schema::{self, open_error};
use crate::writer::{self, ClaimOut, Cmd, Queue, Row, Shared, Tag, Update, ValueText, lock};

/// When the in-memory set of written digests grows past this, it is emptied: it only saves
/// redundant inserts (which `INSERT OR IGNORE` absorbs), so forgetting is always safe.
/// Small: a set of a million 32-byte keys took 69 MB of a million-call run, to skip inserts that
/// only repeat a value within the window.
const SEEN_MAX: usize = 1 << 16;

/// A clean that leaves more than this share of the database's pages free rewrites the file
/// (`VACUUM`) to give them back; below it, new rows reuse the free pages before the file grows.
const VACUUM_FREE_SHARE: f64 = 0.5;
/// How often a clean that rewrote the file tries to give the space back at once.
const CHECKPOINT_ATTEMPTS: u32 = 50;

/// The embedded store: `reel.db` (SQLite, WAL) and `blobs/` in one directory.
pub struct SqliteStore {
    dir: PathBuf,
    blobs: PathBuf,
    shared: Arc<Shared>,
    readers: Readers,
    /// The writer's queue; `None` when read-only.
    tx: Option<Queue>,
    writer: Option<JoinHandle<()>>,
    /// Held while an append takes its sequence numbers and enqueues, so appends with one
    /// lease from several threads reach the queue in the order of their numbers.
    append_order: Mutex<()>,
}

/// Counters of the writer's work, for benchmarks and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Transactions attempted (one per batch).
    pub batches: u64,
    /// Commands written (values, appends, updates, …).
    pub commands: u64,
    /// Transactions attempted at `synchronous=FULL` with a durable write in them: each
    /// commit waits for an fsync.
    pub full_syncs: u64,
    /// Transactions attempted on the thread of a caller waiting for its own command, which
    /// found the writer free (SQLite only; the rest were the writer thread's).
    pub led: u64,
}

impl SqliteStore {
    /// Opens the store in `dir` (the `.reel/` directory), creating it, its database and its
    /// `blobs/` folder if needed, migrating the schema, and starting the writer thread. Lease
    /// expiries and signal times are taken from `clock`.
    pub fn open(dir: &Path, clock: Arc<dyn Clock>) -> Result<SqliteStore, StoreError> {
        Self::open_with_wal_limit(dir, clock, crate::checkpoint::WAL_LIMIT)
    }

    /// [`SqliteStore::open`] with what the WAL may hold before the writer truncates it.
    pub(crate) fn open_with_wal_limit(
        dir: &Path,
        clock: Arc<dyn Clock>,
        wal_limit: u64,
    ) -> Result<SqliteStore, StoreError> {
        let blobs = dir.join("blobs");
        private::create_dir_all(dir).map_err(|e| open_error(dir, e))?;
        private::create_dir_all(&blobs).map_err(|e| open_error(&blobs, e))?;
        let db = dir.join("reel.db");
        schema::create_database(&db)?;
        let conn = schema::open_writer(&db)?;
        let shared = Arc::new(Shared::default());
        let checkpointer = Checkpointer::start(&db, wal_limit);
        let (queue, writer) = writer::spawn(
            conn,
            Arc::clone(&shared),
            checkpointer,
            clock,
            blobs.clone(),
        )
        .map_err(|e| open_error(&db, e))?;
        Ok(SqliteStore {
            dir: dir.to_path_buf(),
            blobs,
            shared,
            readers: Readers::new(&db, None),
            tx: Some(queue),
            writer: Some(writer),
            append_order: Mutex::new(()),
        })
    }

    /// Makes the writer fail, refuse or delay writes as `fault` says (`WHAT@WHEN[*N]`, see
    /// `writer::faults`): debug builds only, for tests of a full disk or a read-only store.
    /// `Err` says what is wrong with the text; a second fault is refused.
    #[cfg(debug_assertions)]
    pub fn inject_fault(&self, text: &str) -> Result<(), String> {
        self.shared.inject_fault(text, false)
    }

    /// Opens an existing store for reading only (the language server, `reel runs` while a run
    /// writes): starts no writer, creates nothing of its own (SQLite may add its WAL index
    /// files beside `reel.db` when no other process has them open), and every write fails with
    /// `ReadOnly`. A missing store or a schema other than this binary's is an `Open` error.
    pub fn open_read_only(dir: &Path) -> Result<SqliteStore, StoreError> {
        let db = dir.join("reel.db");
        if !db.is_file() {
            return Err(open_error(
                dir,
                "there is no Reel store here (reel.db does not exist)",
            ));
        }
        let conn = schema::open_reader(&db)?;
        schema::check_version(&conn, &db)?;
        Ok(SqliteStore {
            dir: dir.to_path_buf(),
            blobs: dir.join("blobs"),
            shared: Arc::new(Shared::default()),
            readers: Readers::new(&db, Some(conn)),
            tx: None,
            writer: None,
            append_order: Mutex::new(()),
        })
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the store was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.tx.is_none()
    }

    /// The database's size in pages and how many of them are free (for tests and reports).
    pub fn page_counts(&self) -> Result<(i64, i64), StoreError> {
        let pages = self.readers.with(writer::pages)?;
        Ok((pages.total, pages.free))
    }

    /// Rewrites the database when most of its pages are free, and cuts the write-ahead log
    /// back, so the file shrinks; true when it did. On a connection of its own, outside the
    /// writer's transactions: it waits for the write lock as any writer does.
    fn vacuum_if_mostly_free(&self) -> Result<bool, StoreError> {
        let db = self.dir.join("reel.db");
        let conn = schema::open_writer(&db)?;
        let pages = writer::pages(&conn)?;
        #[allow(clippy::cast_precision_loss)]
        let mostly_free = pages.free as f64 > pages.total as f64 * VACUUM_FREE_SHARE;
        if !mostly_free {
            return Ok(false);
        }
        conn.execute_batch("VACUUM").map_err(writer::sqlite)?;
        // The rewritten pages sit in the write-ahead log until a checkpoint copies them back
        // and truncates the file. It comes back busy while a reader holds an old snapshot or
        // the background checkpointer is mid-copy, so it is tried a few times before leaving
        // the rest to the checkpointer (the space then comes back at its next pass).
        for _ in 0..CHECKPOINT_ATTEMPTS {
            let busy: i64 = conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
                .unwrap_or(1);
            if busy == 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Ok(true)
    }

    /// What the writer has done so far.
    pub fn stats(&self) -> WriterStats {
        WriterStats {
            batches: self.shared.batches.load(Ordering::Relaxed),
            commands: self.shared.commands.load(Ordering::Relaxed),
            full_syncs: self.shared.full_syncs.load(Ordering::Relaxed),
            led: self.shared.led.load(Ordering::Relaxed),
        }
    }

    fn send(&self, cmd: Cmd) -> Result<(), StoreError> {
        self.tx.as_ref().ok_or(StoreError::ReadOnly)?.send(cmd)
    }

    /// Enqueues a command built around a reply channel and waits for its commit (made on this
    /// thread when the writer is free).
    fn call<T>(&self, make: impl FnOnce(writer::Reply<T>) -> Cmd) -> Result<T, StoreError> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.send(make(reply))?;
        let led = self.tx.as_ref().and_then(|queue| {
            queue.lead(|| match answer.try_recv() {
                Ok(result) => Some(result),
                Err(mpsc::TryRecvError::Empty) => None,
                Err(mpsc::TryRecvError::Disconnected) => Some(Err(StoreError::Closed)),
            })
        });
        led.unwrap_or_else(|| answer.recv().unwrap_or(Err(StoreError::Closed)))
    }

    /// Enqueues a command for a lease's run unless the run is poisoned.
    fn send_for(&self, lease: &Lease, cmd: impl FnOnce(Tag) -> Cmd) -> Result<(), StoreError> {
        if self.tx.is_none() {
            return Err(StoreError::ReadOnly);
        }
        if let Some(e) = self.shared.poisoned(&lease.run, lease.token) {
            return Err(e);
        }
        self.send(cmd(tag(lease)))
            .inspect_err(|e| self.shared.poison(&lease.run, lease.token, e.clone()))
    }

    /// A ticket for a command answered through a oneshot channel: already answered when the
    /// command was committed on this thread (the writer was free).
    fn ticket(
        &self,
        lease: &Lease,
        make: impl FnOnce(Tag, oneshot::Sender<Result<(), StoreError>>) -> Cmd,
    ) -> Ticket {
        let (reply, mut answer) = oneshot::channel();
        if let Err(e) = self.send(make(tag(lease), reply)) {
            return resolved(Err(e));
        }
        let led = self.tx.as_ref().and_then(|queue| {
            queue.lead(|| match answer.try_recv() {
                Ok(result) => Some(result),
                Err(oneshot::error::TryRecvError::Empty) => None,
                Err(oneshot::error::TryRecvError::Closed) => Some(Err(StoreError::Closed)),
            })
        });
        match led {
            Some(result) => resolved(result),
            None => Ticket(answer),
        }
    }
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("dir", &self.dir)
            .field("read_only", &self.is_read_only())
            .finish_non_exhaustive()
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        // Closing the queue lets the writer commit what is left and stop; waiting for it
        // means dropping the store never loses an enqueued write. The writer checkpoints a
        // long WAL as it stops (`Checkpointer::finish`); a short one stays for the next
        // process, as no connection checkpoints when it closes.
        self.readers.close_idle();
        self.tx.take();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

fn tag(lease: &Lease) -> Tag {
    Tag {
        run: lease.run.clone(),
        token: lease.token,
        durable: lease.durability == Durability::Durable,
    }
}

fn resolved(result: Result<(), StoreError>) -> Ticket {
    let (reply, answer) = oneshot::channel();
    // The receiver is right here, so the send cannot fail.
    let _ = reply.send(result);
    Ticket(answer)
}

fn json_text(value: &Value) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Sqlite(format!("unwritable JSON: {e}")))
}

fn new_lease(run: &str, token: u64, owner: &Owner, durability: Durability, next: u64) -> Lease {
    Lease {
        run: run.to_string(),
        token,
        owner: owner.clone(),
        durability,
        next_seq: AtomicU64::new(next),
    }
}

impl StoreRead for SqliteStore {
    fn stored_value(&self, digest: &str) -> Result<Option<Value>, StoreError> {
        Ok(self.stored_values(&[digest])?.pop().flatten())
    }

    fn stored_values(&self, digests: &[&str]) -> Result<Vec<Option<Value>>, StoreError> {
        // What is not written yet is taken from the writer's queue; the rest is looked up on
        // one connection with one prepared statement.
        let mut stored: Vec<Option<Option<String>>> = Vec::with_capacity(digests.len());
        let mut wanted: Vec<(usize, &str)> = Vec::new();
        {
            let pending = lock(&self.shared.pending);
            for (i, &digest) in digests.iter().enumerate() {
                stored.push(match pending.get(digest) {
                    _ if !blobs::is_digest(digest) => None,
                    Some(text) => Some(Some(text.text().to_string())),
                    None => {
                        wanted.push((i, digest));
                        None
                    }
                });
            }
        }
        if !wanted.is_empty() {
            let found = self
                .readers
                .with(|c| read::value_rows(c, &wanted.iter().map(|w| w.1).collect::<Vec<_>>()))?;
            for ((i, _), row) in wanted.into_iter().zip(found) {
                stored[i] = row;
            }
        }
        digests
            .iter()
            .zip(stored)
            .map(|(&digest, stored)| {
                let text = match stored {
                    None => return Ok(None),
                    Some(Some(text)) => text,
                    Some(None) => blobs::read_blob(&self.blobs, digest)?.ok_or_else(|| {
                        StoreError::MissingValue {
                            digest: digest.to_string(),
                        }
                    })?,
                };
                read::parse_value(digest, &text).map(Some)
            })
            .collect()
    }

    fn get_spec(&self, digest: &str) -> Result<Option<String>, StoreError> {
        self.readers.with(|c| read::spec(c, digest))
    }

    fn read_spec(&self, digest: &str, read: &mut dyn FnMut(&str)) -> Result<bool, StoreError> {
        self.readers.with(|c| read::read_spec(c, digest, read))
    }

    fn read_spec_binary(
        &self,
        digest: &str,
        read: &mut dyn FnMut(&[u8]),
    ) -> Result<bool, StoreError> {
        self.readers
            .with(|c| read::read_spec_binary(c, digest, read))
    }

    fn run(&self, id: &str) -> Result<Option<RunRow>, StoreError> {
        self.readers.with(|c| read::run(c, id))
    }

    fn find_runs(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        self.readers.with(|c| read::find_runs(c, prefix))
    }

    fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRow>, StoreError> {
        self.readers.with(|c| read::list_runs(c, filter))
    }

    fn read_journal(
        &self,
        run: &str,
        from_seq: u64,
        f: &mut dyn FnMut(EventRow) -> Flow,
    ) -> Result<(), StoreError> {
        self.readers
            .with(|c| read::read_journal(c, run, from_seq, f))
    }

    fn read_journal_rows(
        &self,
        run: &str,
        from_seq: u64,
        f: &mut dyn FnMut(JournalRow) -> Flow,
    ) -> Result<(), StoreError> {
        self.readers
            .with(|c| read::read_journal_rows(c, run, from_seq, f))
    }

    fn read_journal_raw(
        &self,
        run: &str,
        from_seq: u64,
        f: &mut dyn FnMut(RawJournalRow<'_>) -> Flow,
    ) -> Result<(), StoreError> {
        self.readers
            .with(|c| read::read_journal_raw(c, run, from_seq, f))
    }

    fn succeeded_steps(&self, run: &str) -> Result<std::collections::HashSet<String>, StoreError> {
        self.readers.with(|c| read::succeeded_steps(c, run))
    }

    fn unknown_outcome_rows(&self) -> Result<Vec<EventRow>, StoreError> {
        self.readers.with(read::unknown_outcome_rows)
    }

    fn logs(&self, run: &str) -> Result<Vec<LogRow>, StoreError> {
        self.readers.with(|c| read::logs(c, run))
    }

    fn pending_signals(&self, run: &str) -> Result<Vec<SignalRow>, StoreError> {
        self.readers.with(|c| read::pending_signals(c, run))
    }

    fn due_runs(&self, now_ms: i64, limit: usize) -> Result<Vec<String>, StoreError> {
        self.readers.with(|c| read::due_runs(c, now_ms, limit))
    }

    fn next_due(&self) -> Result<Option<i64>, StoreError> {
        self.readers.with(|c| {
            c.query_row(
                "SELECT MIN(due_at) FROM runs WHERE status = 'waiting' AND due_at IS NOT NULL",
                [],
                |r| r.get(0),
            )
            .map_err(writer::sqlite)
        })
    }

    fn query(
        &self,
        sql: &str,
        limits: crate::QueryLimits,
    ) -> Result<crate::QueryAnswer, StoreError> {
        crate::query::sqlite(&self.dir.join("reel.db"), sql, limits)
    }
}

impl Store for SqliteStore {
    fn put_canonical(&self, digest: &str, text: String) -> Result<Kept, StoreError> {
        if self.tx.is_none() {
            return Err(StoreError::ReadOnly);
        }
        let digest = digest.to_string();
        let Some(key) = blobs::digest_key(&digest) else {
            return Err(StoreError::Sqlite(format!("malformed digest {digest}")));
        };
        let size = i64::try_from(text.len()).unwrap_or(i64::MAX);
        let external = text.len() > INLINE_MAX;
        let text: Arc<str> = Arc::from(text);
        if external {
            // Written before its row is enqueued (and outside the lock, being slow), so no
            // row ever points at a file that is not there yet.
            {
                let seen = lock(&self.shared.seen);
                if seen.contains(&key) {
                    return Ok(self.shared.kept(&digest, text, false));
                }
            }
            blobs::write_blob(&self.blobs, &digest, &text)?;
        }
        // The digest joins the set and its command joins the queue under one lock: whoever
        // sees the digest in the set knows its value is queued ahead of anything they enqueue.
        let mut seen = lock(&self.shared.seen);
        let kept = self.shared.kept(&digest, Arc::clone(&text), false);
        if seen.len() >= SEEN_MAX {
            seen.clear();
        }
        if !seen.insert(key) {
            return Ok(kept);
        }
        let text = if external {
            ValueText::External(text)
        } else {
            ValueText::Inline(text)
        };
        lock(&self.shared.pending).insert(digest.clone(), text.clone());
        let sent = self.send(Cmd::Value {
            digest: digest.clone(),
            text,
            size,
        });
        if let Err(e) = sent {
            seen.remove(&key);
            lock(&self.shared.pending).remove(&digest);
            return Err(e);
        }
        Ok(kept)
    }

    fn put_spec(&self, digest: &str, json: &str) -> Result<Kept, StoreError> {
        let kept = self.shared.kept_spec(digest, json);
        self.call(|reply| Cmd::Spec {
            digest: digest.to_string(),
            json: Arc::clone(&kept.text),
            reply,
        })?;
        Ok(kept)
    }

    fn keep_spec_binary(&self, spec: &FlowSpec) -> Result<(), StoreError> {
        self.shared.keep_binary_once(&spec.digest, || {
            if self
                .readers
                .with(|c| read::has_spec_binary(c, &spec.digest))?
            {
                return Ok(());
            }
            self.send(Cmd::SpecBinary {
                digest: spec.digest.clone(),
                layout: reel_flowspec::BINARY_LAYOUT,
                bytes: spec.to_binary(),
            })
        })
    }

    fn create_run(
        &self,
        mut run: NewRun,
        owner: &Owner,
        lease_ms: u64,
    ) -> Result<Lease, StoreError> {
        let (id, durability) = (run.id.clone(), run.durability);
        let rows = std::mem::take(&mut run.first_events)
            .into_iter()
            .map(|e| {
                Ok(Row {
                    data: json_text(&e.data)?,
                    at: e.at,
                    kind: e.kind,
                    step: e.step,
                    index: e.index,
                    attempt: e.attempt,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let next_seq = rows.len() as u64;
        self.call(|reply| Cmd::Create {
            run: Box::new(run),
            rows,
            owner: owner.clone(),
            lease_ms,
            reply,
        })?;
        Ok(new_lease(&id, 1, owner, durability, next_seq))
    }

    fn claim_run(&self, run: &str, owner: &Owner, lease_ms: u64) -> Result<Claim, StoreError> {
        let out = self.call(|reply| Cmd::Claim {
            run: run.to_string(),
            owner: owner.clone(),
            lease_ms,
            out: ClaimOut::NotFound,
            reply,
        })?;
        Ok(match out {
            ClaimOut::Claimed {
                token,
                next_seq,
                durability,
            } => Claim::Claimed(new_lease(run, token, owner, durability, next_seq)),
            ClaimOut::HeldBy(holder) => Claim::HeldBy(holder),
            ClaimOut::NotFound => Claim::NotFound,
        })
    }

    fn renew(&self, lease: &Lease, lease_ms: u64) -> Result<(), StoreError> {
        self.call(|reply| Cmd::Renew {
            tag: tag(lease),
            lease_ms,
            reply,
        })
    }

    fn release(&self, lease: &Lease) -> Ticket {
        self.ticket(lease, |tag, reply| Cmd::Release { tag, reply })
    }

    fn append_kept(
        &self,
        lease: &Lease,
        events: Vec<NewEvent>,
        kept: Vec<Kept>,
    ) -> Result<(), StoreError> {
        if self.tx.is_none() {
            return Err(StoreError::ReadOnly);
        }
        if let Some(e) = self.shared.poisoned(&lease.run, lease.token) {
            return Err(e);
        }
        if events.is_empty() {
            return Ok(());
        }
        // Serialising here rather than in the writer spreads the work over the callers.
        let rows = events
            .into_iter()
            .map(|e| {
                Ok(Row {
                    data: json_text(&e.data)?,
                    at: e.at,
                    kind: e.kind,
                    step: e.step,
                    index: e.index,
                    attempt: e.attempt,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let _order = lock(&self.append_order);
        let first_seq = lease
            .next_seq
            .fetch_add(rows.len() as u64, Ordering::SeqCst);
        self.send(Cmd::Append {
            tag: tag(lease),
            first_seq,
            rows,
            kept,
        })
        // The numbers are taken: a run whose append did not even reach the queue must write
        // nothing after it.
        .inspect_err(|e| self.shared.poison(&lease.run, lease.token, e.clone()))
    }

    fn update_run(&self, lease: &Lease, update: RunUpdate) -> Result<(), StoreError> {
        let update = Update {
            status: update.status.map(|s| s.as_str()),
            due_at: update.due_at,
            waiting_on: update
                .waiting_on
                .map(|w| json_text(&Value::from(w)))
                .transpose()?,
            clear_signal_pending: update.clear_signal_pending,
            ended_at: update.ended_at,
            output_digest: update.output_digest,
            error: update.error.as_ref().map(json_text).transpose()?,
        };
        self.send_for(lease, |tag| Cmd::Update { tag, update })
    }

    fn append_log(&self, lease: &Lease, log: LogRow) -> Result<(), StoreError> {
        self.send_for(lease, |tag| Cmd::Log { tag, log })
    }

    fn consume_signal(&self, lease: &Lease, seq: u64, by: u64) -> Result<(), StoreError> {
        self.send_for(lease, |tag| Cmd::Consume { tag, seq, by })
    }

    fn sync(&self, lease: &Lease) -> Ticket {
        if self.tx.is_none() {
            return resolved(Err(StoreError::ReadOnly));
        }
        if let Some(e) = self.shared.poisoned(&lease.run, lease.token) {
            return resolved(Err(e));
        }
        self.ticket(lease, |tag, reply| Cmd::Sync { tag, reply })
    }

    fn send_signal(&self, run: &str, name: &str, payload: &Value) -> Result<u64, StoreError> {
        let text = canonical_json(payload);
        let payload = self.put_canonical(&sha256_hex(text.as_bytes()), text)?;
        self.call(|reply| Cmd::Signal {
            run: run.to_string(),
            name: name.to_string(),
            payload,
            seq: 0,
            sent_at: None,
            reply,
        })
    }

    fn request_cancel(&self, run: &str) -> Result<bool, StoreError> {
        self.call(|reply| Cmd::Cancel {
            run: run.to_string(),
            done: false,
            reply,
        })
    }

    fn clean(&self, scope: &CleanScope, dry_run: bool) -> Result<Cleaned, StoreError> {
        let (mut cleaned, blob_files) = self.call(|reply| Cmd::Clean {
            scope: scope.clone(),
            dry_run,
            out: (Cleaned::default(), Vec::new()),
            reply,
        })?;
        if dry_run || cleaned.runs.is_empty() {
            return Ok(cleaned);
        }
        // The rows are gone, so no reader finds these files any more; a file left behind by
        // a crash here is only untidy. Each goes in a write transaction of its own, unless a
        // writer stored its value again meanwhile (see `Cmd::Unlink`).
        if !blob_files.is_empty() {
            self.call(|reply| Cmd::Unlink {
                digests: blob_files,
                reply,
            })?;
        }
        cleaned.vacuumed = self.vacuum_if_mostly_free()?;
        Ok(cleaned)
    }
}

mod copy;
pub use copy::SqliteImporter;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod clean_tests;
