//! [`PgStore`]: the store on PostgreSQL, for runs shared by workers on many machines.
//!
//! The same contract as [`crate::SqliteStore`], built the same way: writes are enqueued in
//! order to one writer thread that commits them in batches (group commit across runs), and
//! blocking calls wait on a std channel, never on tokio's `block_on`, so they are safe inside a
//! runtime. The differences: every value lives in the database however large (any worker on
//! any machine reads it), reads go through reader threads with connections of their own, and
//! the schema lives in its own PostgreSQL schema, `reel`, migrated at open under an advisory
//! lock.

mod claim;
mod clean;
mod conn;
mod copy;
mod listen;
mod read;
mod schema;
// The test server the store's tests share, for the unit tests of the modules here.
#[cfg(test)]
#[allow(dead_code)]
#[path = "../../tests/test_server/mod.rs"]
mod test_server;
mod writer;

pub use copy::PgImporter;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use reel_flowspec::canonical::{canonical_json, sha256_hex};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::api::{
    Claim, CleanScope, Cleaned, DueClaim, Durability, EventRow, Flow, JournalRow, Kept, Lease,
    LogRow, NewEvent, NewRun, Owner, RunFilter, RunRow, RunUpdate, SignalRow, Store, StoreError,
    StoreRead, Ticket,
};
use crate::blobs;
use crate::clock::Clock;
use crate::writer::{self as queue, ClaimOut, Cmd, Row, Shared, Tag, Update, ValueText, lock};

pub(crate) use conn::describe;
pub use conn::{PgAuth, is_postgres_url, redact_url};
pub use listen::{DueNotice, PgListener};

use read::Readers;

/// When the in-memory set of written digests grows past this, it is emptied (forgetting is
/// always safe: a value is inserted `ON CONFLICT DO NOTHING`).
const SEEN_MAX: usize = 1 << 20;

/// How many commands may wait for the writer before callers block.
const CHANNEL_CAPACITY: usize = 4096;

/// The store on PostgreSQL.
pub struct PgStore {
    connector: conn::Connector,
    shown: String,
    shared: Arc<Shared>,
    readers: Readers,
    /// The writer's queue; `None` when read-only.
    tx: Option<crate::writer::queue::Sender>,
    writer: Option<JoinHandle<()>>,
    /// Held while an append takes its sequence numbers and enqueues.
    append_order: Mutex<()>,
    /// Statements the store sent to the server (its writer's, in committed batches, and its
    /// readers'), each one round trip.
    trips: Arc<AtomicU64>,
    /// The store's clock: timers' time, and leases' when it does not tell the real time;
    /// `None` when read-only (leases are then judged by the database's clock).
    clock: Option<Arc<dyn Clock>>,
    /// Whether the last look failed for want of the server, its claims perhaps made unheard.
    look_lost: AtomicBool,
}

impl PgStore {
    /// Connects to the database `url` names, applies the migrations it lacks (refusing a
    /// schema newer than this binary's), and starts the writer. Lease expiries and signal
    /// times are taken from `clock`. No error shows the URL's password.
    pub fn open(url: &str, clock: Arc<dyn Clock>) -> Result<PgStore, StoreError> {
        PgStore::open_with(url, &PgAuth::default(), clock)
    }

    /// [`PgStore::open`], with a password from `auth` when the URL has none.
    pub fn open_with(
        url: &str,
        auth: &PgAuth,
        clock: Arc<dyn Clock>,
    ) -> Result<PgStore, StoreError> {
        let connector = conn::Connector::new(url, auth)?;
        // The migrations' connection goes on as the first reader's; the writer opens one of
        // its own (see `conn::Pipelined`).
        let reader_conn =
            connector.opened(|client| schema::migrate(client, &connector).map(|_| ()))?;
        let (tx, rx) = crate::writer::queue::channel(CHANNEL_CAPACITY);
        let shared = Arc::new(Shared::default());
        let trips = Arc::new(AtomicU64::new(0));
        let writer = writer::spawn(
            connector.clone(),
            rx,
            Arc::clone(&shared),
            Arc::clone(&clock),
            Arc::clone(&trips),
        )?;
        Ok(PgStore {
            shown: connector.shown().to_string(),
            connector: connector.clone(),
            shared,
            readers: Readers::start(&connector, reader_conn, &trips)?,
            trips,
            tx: Some(tx),
            writer: Some(writer),
            append_order: Mutex::new(()),
            clock: Some(clock),
            look_lost: AtomicBool::new(false),
        })
    }

    /// Makes the server end the writer's session around a batch as `fault` says
    /// (`session-ends@WHEN[*N]` or `answer-lost@WHEN[*N]`, see `writer::faults`): debug builds
    /// only, for tests of a lost connection. `Err` says what is wrong with the text; a second
    /// fault is refused.
    #[cfg(debug_assertions)]
    pub fn inject_fault(&self, text: &str) -> Result<(), String> {
        self.shared.inject_fault(text, true)
    }

    /// Connects for reading only: starts no writer, changes nothing in the database, and
    /// refuses a database without the store's schema or with another version of it.
    pub fn open_read_only(url: &str) -> Result<PgStore, StoreError> {
        PgStore::open_read_only_with(url, &PgAuth::default())
    }

    /// [`PgStore::open_read_only`], with a password from `auth` when the URL has none.
    pub fn open_read_only_with(url: &str, auth: &PgAuth) -> Result<PgStore, StoreError> {
        let connector = conn::Connector::new(url, auth)?.impatient();
        let mut client = connector.connect()?;
        schema::check_version(&mut client, &connector)?;
        let trips = Arc::new(AtomicU64::new(0));
        Ok(PgStore {
            shown: connector.shown().to_string(),
            connector: connector.clone(),
            shared: Arc::new(Shared::default()),
            readers: Readers::start(&connector, client, &trips)?,
            trips,
            tx: None,
            writer: None,
            append_order: Mutex::new(()),
            clock: None,
            look_lost: AtomicBool::new(false),
        })
    }

    /// Where the store is, without the password: `postgres://user@host:port/db`.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Whether the store was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.tx.is_none()
    }

    /// What the writer has done so far.
    pub fn stats(&self) -> crate::WriterStats {
        crate::WriterStats {
            batches: self.shared.batches.load(Ordering::Relaxed),
            commands: self.shared.commands.load(Ordering::Relaxed),
            full_syncs: self.shared.full_syncs.load(Ordering::Relaxed),
            led: self.shared.led.load(Ordering::Relaxed),
        }
    }

    /// How many round trips to the server the store has taken so far: its writer's in
    /// committed batches (each batch's first sends `BEGIN`, its opening, its values and appends
    /// together, and often its `COMMIT`) and its readers' (a statement each, the preparing of a
    /// statement, once per connection, included); not those of `query`.
    /// Tests count with it that a step's cost does not grow with the run's length.
    pub fn round_trips(&self) -> u64 {
        self.trips.load(Ordering::Relaxed)
    }

    /// The time leases are judged by, as `claim.rs` takes it.
    fn lease_now(&self) -> Option<i64> {
        self.clock.as_deref().and_then(claim::lease_now)
    }

    fn send(&self, cmd: Cmd) -> Result<(), StoreError> {
        let tx = self.tx.as_ref().ok_or(StoreError::ReadOnly)?;
        // The writer thread waits on the channel itself: nothing to wake.
        tx.send(cmd, || {})
    }

    fn call<T>(&self, make: impl FnOnce(queue::Reply<T>) -> Cmd) -> Result<T, StoreError> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.send(make(reply))?;
        answer.recv().unwrap_or(Err(StoreError::Closed))
    }

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

    fn ticket(
        &self,
        lease: &Lease,
        make: impl FnOnce(Tag, oneshot::Sender<Result<(), StoreError>>) -> Cmd,
    ) -> Ticket {
        let (reply, answer) = oneshot::channel();
        if let Err(e) = self.send(make(tag(lease), reply)) {
            return resolved(Err(e));
        }
        Ticket(answer)
    }
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("url", &self.shown)
            .field("read_only", &self.is_read_only())
            .finish_non_exhaustive()
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        // The writer commits what is queued before it stops: dropping the store loses no
        // enqueued write. The reader threads end and close their connections meanwhile,
        // rather than one after the other once the writer is done.
        self.tx.take();
        self.readers.let_go();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
        self.readers.stop();
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
    let _ = reply.send(result);
    Ticket(answer)
}

fn json_text(value: &Value) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Postgres(format!("unwritable JSON: {e}")))
}

fn rows_of(events: Vec<NewEvent>) -> Result<Vec<Row>, StoreError> {
    events
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
        .collect()
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

impl StoreRead for PgStore {
    fn stored_value(&self, digest: &str) -> Result<Option<Value>, StoreError> {
        if !blobs::is_digest(digest) {
            return Ok(None);
        }
        let pending = lock(&self.shared.pending).get(digest).cloned();
        let text = match pending {
            Some(text) => Some(text.text().to_string()),
            None => {
                let digest = digest.to_string();
                self.readers.with(move |c| read::value_text(c, &digest))?
            }
        };
        text.map(|text| crate::read::parse_value(digest, &text))
            .transpose()
    }

    fn stored_values(&self, digests: &[&str]) -> Result<Vec<Option<Value>>, StoreError> {
        // What is not written yet is taken from the writer's queue; the rest is read in one
        // round trip, each digest once.
        let mut texts: Vec<Option<String>> = vec![None; digests.len()];
        let mut wanted: Vec<String> = Vec::new();
        {
            let pending = lock(&self.shared.pending);
            for (i, &digest) in digests.iter().enumerate() {
                if !blobs::is_digest(digest) {
                    continue;
                }
                match pending.get(digest) {
                    Some(text) => texts[i] = Some(text.text().to_string()),
                    None => wanted.push(digest.to_string()),
                }
            }
        }
        wanted.sort_unstable();
        wanted.dedup();
        if !wanted.is_empty() {
            let found = self.readers.with(move |c| read::value_texts(c, &wanted))?;
            for (i, &digest) in digests.iter().enumerate() {
                if texts[i].is_none()
                    && let Some(text) = found.get(digest)
                {
                    texts[i] = Some(text.clone());
                }
            }
        }
        digests
            .iter()
            .zip(texts)
            .map(|(&digest, text)| {
                text.map(|text| crate::read::parse_value(digest, &text))
                    .transpose()
            })
            .collect()
    }

    fn get_spec(&self, digest: &str) -> Result<Option<String>, StoreError> {
        let digest = digest.to_string();
        self.readers.with(move |c| read::spec(c, &digest))
    }

    fn read_spec_binary(
        &self,
        digest: &str,
        read: &mut dyn FnMut(&[u8]),
    ) -> Result<bool, StoreError> {
        let digest = digest.to_string();
        let bytes = self.readers.with(move |c| read::spec_binary(c, &digest))?;
        Ok(bytes.map(|b| read(&b)).is_some())
    }

    fn run(&self, id: &str) -> Result<Option<RunRow>, StoreError> {
        let id = id.to_string();
        self.readers.with(move |c| read::run(c, &id))
    }

    fn find_runs(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let prefix = prefix.to_string();
        self.readers.with(move |c| read::find_runs(c, &prefix))
    }

    fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRow>, StoreError> {
        let filter = filter.clone();
        self.readers.with(move |c| read::list_runs(c, &filter))
    }

    fn read_journal(
        &self,
        run: &str,
        from_seq: u64,
        f: &mut dyn FnMut(EventRow) -> Flow,
    ) -> Result<(), StoreError> {
        let mut first_hole = None;
        self.read_journal_rows(run, from_seq, &mut |row| match row {
            JournalRow::Event(event) => f(event),
            JournalRow::Hole { seq, message } => {
                first_hole = Some(StoreError::Hole {
                    run: run.to_string(),
                    seq,
                    message,
                });
                Flow::Stop
            }
        })?;
        first_hole.map_or(Ok(()), Err)
    }

    fn read_journal_rows(
        &self,
        run: &str,
        from_seq: u64,
        f: &mut dyn FnMut(JournalRow) -> Flow,
    ) -> Result<(), StoreError> {
        // The journal's length is read first (with the first page, in one round trip) and only
        // rows below it are read: rows are never changed once written, so pages read one after
        // the other show the journal as it was at that first read, and rows appended meanwhile
        // do not look like missing ones.
        let (id, from) = (run.to_string(), i64::try_from(from_seq).unwrap_or(i64::MAX));
        let Some((end, head)) = self
            .readers
            .with(move |c| read::journal_head(c, &id, from))?
        else {
            return Err(StoreError::NotFound(run.to_string()));
        };
        let mut expected = from_seq;
        let mut head = Some(head);
        loop {
            let page = match head.take() {
                Some(page) => page,
                None => {
                    let (id, from) = (run.to_string(), i64::try_from(expected).unwrap_or(i64::MAX));
                    self.readers
                        .with(move |c| read::journal_page(c, &id, from, end))?
                }
            };
            let full = page.len() as i64 >= read::PAGE;
            if let Flow::Stop = read::hand_rows(page, &mut expected, f) {
                return Ok(());
            }
            if !full {
                break;
            }
        }
        read::hand_missing(&mut expected, u64::try_from(end).unwrap_or(0), f);
        Ok(())
    }

    fn succeeded_steps(&self, run: &str) -> Result<std::collections::HashSet<String>, StoreError> {
        let run = run.to_string();
        self.readers.with(move |c| read::succeeded_steps(c, &run))
    }

    fn unknown_outcome_rows(&self) -> Result<Vec<EventRow>, StoreError> {
        self.readers.with(read::unknown_outcome_rows)
    }

    fn logs(&self, run: &str) -> Result<Vec<LogRow>, StoreError> {
        let run = run.to_string();
        self.readers.with(move |c| read::logs(c, &run))
    }

    fn pending_signals(&self, run: &str) -> Result<Vec<SignalRow>, StoreError> {
        let run = run.to_string();
        self.readers.with(move |c| read::pending_signals(c, &run))
    }

    fn pending_signals_with_payloads(
        &self,
        run: &str,
        names: &[String],
    ) -> Result<Vec<(SignalRow, Option<Value>)>, StoreError> {
        let (run, names) = (run.to_string(), names.to_vec());
        self.readers
            .with(move |c| read::pending_signals_with_payloads(c, &run, &names))?
            .into_iter()
            .map(|(row, text)| {
                let payload = text
                    .map(|text| crate::read::parse_value(&row.payload_digest, &text))
                    .transpose()?;
                Ok((row, payload))
            })
            .collect()
    }

    fn due_runs(&self, now_ms: i64, limit: usize) -> Result<Vec<String>, StoreError> {
        let lease_now = self.lease_now();
        self.readers
            .with(move |c| read::due_runs(c, now_ms, lease_now, limit))
    }

    fn next_due(&self) -> Result<Option<i64>, StoreError> {
        let clock = self.clock.clone();
        self.readers
            .with(move |c| claim::next_due(c, clock.as_deref()))
    }

    fn query(
        &self,
        sql: &str,
        limits: crate::QueryLimits,
    ) -> Result<crate::QueryAnswer, StoreError> {
        let sql = sql.to_string();
        self.readers
            .with(move |c| crate::query::postgres(c, &sql, limits))
    }
}

impl Store for PgStore {
    fn put_canonical(&self, digest: &str, text: String) -> Result<Kept, StoreError> {
        if self.tx.is_none() {
            return Err(StoreError::ReadOnly);
        }
        let Some(key) = blobs::digest_key(digest) else {
            return Err(StoreError::Postgres(format!("malformed digest {digest}")));
        };
        let size = i64::try_from(text.len()).unwrap_or(i64::MAX);
        let text: Arc<str> = Arc::from(text);
        // As in the SQLite store: the digest joins the set and its command the queue under one
        // lock, so whoever sees the digest knows its value is queued ahead of their writes.
        let mut seen = lock(&self.shared.seen);
        let kept = self.shared.kept(digest, Arc::clone(&text), false);
        if seen.len() >= SEEN_MAX {
            seen.clear();
        }
        if !seen.insert(key) {
            return Ok(kept);
        }
        let text = ValueText::Inline(text);
        let digest = digest.to_string();
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

    fn keep_spec_binary(&self, spec: &reel_flowspec::FlowSpec) -> Result<(), StoreError> {
        self.shared.keep_binary_once(&spec.digest, || {
            let digest = spec.digest.clone();
            if self
                .readers
                .with(move |c| read::has_spec_binary(c, &digest))?
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
        let rows = rows_of(std::mem::take(&mut run.first_events))?;
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

    fn claim_due(
        &self,
        now_ms: i64,
        owner: &Owner,
        lease_ms: u64,
        limit: usize,
        skip: &HashSet<String>,
    ) -> Result<Vec<DueClaim>, StoreError> {
        // The look's claim; a worker asks through `look`, which tells the next due time too.
        Ok(self.look(now_ms, owner, lease_ms, limit, skip)?.claims)
    }

    fn look(
        &self,
        now_ms: i64,
        owner: &Owner,
        lease_ms: u64,
        limit: usize,
        skip: &HashSet<String>,
    ) -> Result<crate::Look, StoreError> {
        if self.tx.is_none() {
            return Err(StoreError::ReadOnly);
        }
        // One statement, committed on its own: it needs no place in the writer's batches, and
        // the writer's later writes under these leases see it committed.
        let clock = self.clock.clone();
        let (who, passed) = (owner.clone(), skip.clone());
        // After a look that failed for want of the server, this one takes up what that one
        // may have claimed unheard (see `claim::look`).
        let mine_too = self.look_lost.swap(false, Ordering::SeqCst);
        #[cfg(debug_assertions)]
        let fault = self.shared.fault.get().and_then(|f| f.look_end());
        let looked = self.readers.with_once(move |c| {
            #[cfg(debug_assertions)]
            if fault == Some(crate::writer::faults::FaultKind::SessionEnds) {
                end_session(c)?;
            }
            let (mut claims, seen) = claim::look(
                c,
                clock.as_deref(),
                now_ms,
                &who,
                lease_ms,
                limit,
                &passed,
                mine_too,
            )?;
            #[cfg(debug_assertions)]
            if fault == Some(crate::writer::faults::FaultKind::AnswerLost) {
                end_session(c)?;
            }
            // The leases are taken: a failed read leaves them to the claimer's resume, which
            // reads them itself (and meets the error, if it lasts, there).
            let _ = claim::read_with_claims(c, &mut claims);
            Ok::<_, StoreError>((claims, seen))
        });
        if let Err(StoreError::Unreachable(_)) = &looked {
            self.look_lost.store(true, Ordering::SeqCst);
        }
        let (mut claims, seen) = looked?;
        let mut next_due = seen.next_due;
        let dead: Vec<String> = seen
            .holders_here
            .into_iter()
            .filter(Owner::is_dead)
            .map(|h| h.id)
            .collect();
        if claims.len() < limit && !dead.is_empty() {
            // Rare (a worker killed on this host a moment ago): its runs are read apart, and
            // each claimed alone.
            let mut passed = skip.clone();
            passed.extend(claims.iter().map(|c| c.lease.run.clone()));
            let runs = self
                .readers
                .with(move |c| claim::dead_runs(c, now_ms, &passed, &dead))?;
            for (run, was) in runs {
                if claims.len() >= limit {
                    break;
                }
                if let Claim::Claimed(lease) = self.claim_run(&run, owner, lease_ms)?
                    && let Some(claim) = crate::api::due_claim(self, lease, was)?
                {
                    claims.push(claim);
                }
            }
            // The look saw those runs due; what is due now is asked again.
            next_due = self.next_due()?;
        }
        Ok(crate::Look { claims, next_due })
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
        let rows = rows_of(events)?;
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
        let (cleaned, _no_files) = self.call(|reply| Cmd::Clean {
            scope: scope.clone(),
            dry_run,
            out: (Cleaned::default(), Vec::new()),
            reply,
        })?;
        Ok(cleaned)
    }
}

/// A fresh database on the test server with the store's schema in it (opening a store writes
/// it), its URL, and a client whose search path is the schema, for a unit test's rows.
#[cfg(test)]
fn schema_database(prefix: &str) -> (String, postgres::Client) {
    let url = test_server::fresh_database(prefix);
    drop(PgStore::open(&url, Arc::new(crate::ManualClock::at(0))).unwrap());
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    client.batch_execute("SET search_path TO reel").unwrap();
    (url, client)
}

/// The SQL that adds `n` ended runs (`ended-1` …) to a store, as a team's store holds after a
/// while: what a unit test crowds a store with.
#[cfg(test)]
fn ended_runs(n: i64) -> String {
    format!(
        "INSERT INTO runs (id, flow, flow_digest, cwd, status, created_at, ended_at, durability)
         SELECT 'ended-' || g, 'f', 'd', '/', 'succeeded', g, g, 'fast'
         FROM generate_series(1, {n}) g;"
    )
}

/// The rows of `table` this connection's open transaction has fetched so far, as the server
/// counts them (`pg_stat_xact_user_tables`): what a unit test counts a read's work by.
#[cfg(test)]
fn rows_fetched(client: &mut postgres::Client, table: &str) -> i64 {
    client
        .query_one(
            "SELECT COALESCE(seq_tup_read, 0) + COALESCE(idx_tup_fetch, 0)
             FROM pg_stat_xact_user_tables WHERE relname = $1",
            &[&table],
        )
        .unwrap()
        .get(0)
}

/// Ends a reader's own session as a server's restart or an administrator would (a test's
/// fault, see `writer::faults`): the error the look then meets.
#[cfg(debug_assertions)]
fn end_session(client: &mut postgres::Client) -> Result<(), StoreError> {
    client
        .batch_execute(conn::END_OWN_SESSION)
        .and_then(|()| client.batch_execute("SELECT 1"))
        .map_err(|e| conn::pg(&e))
}
