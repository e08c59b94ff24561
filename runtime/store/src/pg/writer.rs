//! The PostgreSQL writer thread: the same commands as the SQLite writer's, committed the same
//! way (one transaction per batch, gathered across runs), on one connection of its own.
//!
//! Fencing is a row-locking predicate in each write's own statement: an append moves the run's
//! `next_seq` only `WHERE lease_token = $token`, and a log or a consumed signal first takes a
//! share lock on the run's row with that token. Under READ COMMITTED such a statement waits
//! for a concurrent claim to commit and then re-reads the row, so a process whose lease was
//! taken over (even one that slept through its lease and wakes up) matches no row and writes
//! nothing; a read of the row without a lock would see the old token and let it write.
//!
//! A statement that fails aborts a PostgreSQL transaction, so unlike on SQLite any SQL error
//! fails the whole batch; refusals (a lost lease, a journal that continues elsewhere, a missing
//! run) are found as "no row matched", before the command's first write, and fail it alone.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{RecvTimeoutError, TryRecvError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use postgres::Statement;

use super::claim::{lease_now, lease_time};
use super::conn::{Connector, Pipelined, pg};
use super::listen::{DUE_CHANNEL, TIMER_CHANNEL};
use crate::api::{Durability, Kept, NewRun, Owner, StoreError};
use crate::clock::Clock;
#[cfg(debug_assertions)]
use crate::writer::faults::FaultKind;
use crate::writer::{ClaimOut, Cmd, Row, Shared, Tag, Update, ValueText, durability_str, lock};
use fate::{Fate, RunNow, Xact};

mod fate;

/// The advisory lock that orders cleans with the batches that name values ("reelvals").
const VALUES_LOCK: i64 = 0x7265_656c_7661_6c73;

/// At most this many commands go into one transaction.
const MAX_BATCH_COMMANDS: usize = 4096;
/// How long a batch of only unawaited writes waits for company.
const LINGER: Duration = Duration::from_millis(2);
/// How many times a batch is tried again when the server aborted it to break a deadlock with
/// another process's batch (each batch locks its runs' rows in its own order), and at least
/// how many times when its session ended.
const BATCH_ATTEMPTS: u32 = 8;

/// How a command failed.
pub(super) enum Fail {
    /// Before it wrote anything: it fails alone.
    Command(StoreError),
    /// With the transaction: the batch fails.
    Batch(Lost),
}

impl From<StoreError> for Fail {
    fn from(e: StoreError) -> Self {
        Fail::Command(e)
    }
}

/// A lost transaction, and whether trying the batch again can succeed.
pub(super) struct Lost {
    pub(super) error: StoreError,
    /// The server aborted it for a deadlock or a serialization failure: nothing was
    /// committed, and the same batch may go through on another try.
    retry: bool,
    /// The connection is gone: the client saw it close, or the server ended the session
    /// (a `FATAL` error, as `pg_terminate_backend` or a shutdown sends). The next batch
    /// connects again. The client learns that the socket closed only while its connection
    /// is driven, which is while a batch waits for its answers; a batch of one statement
    /// could have its answer, the server's `FATAL`, before that.
    broken: bool,
    /// Whether the batch's `COMMIT` had gone out (it may have been made), and if so the
    /// transaction's id when the batch read it (see [`fate::Xact`]).
    commit: Option<Option<i64>>,
}

impl Lost {
    /// The same, met once the batch's `COMMIT` (its transaction `xid`, when read) went out.
    fn committing(self, xid: Option<i64>) -> Lost {
        Lost {
            commit: Some(xid),
            ..self
        }
    }
}

impl From<StoreError> for Lost {
    fn from(error: StoreError) -> Self {
        Lost {
            error,
            retry: false,
            broken: false,
            commit: None,
        }
    }
}

/// A failed statement as a lost transaction.
pub(super) fn lost(e: &postgres::Error) -> Lost {
    use postgres::error::SqlState;
    let retry = e.code().is_some_and(|c| {
        *c == SqlState::T_R_DEADLOCK_DETECTED || *c == SqlState::T_R_SERIALIZATION_FAILURE
    });
    let broken = super::conn::ended(e);
    Lost {
        error: pg(e),
        retry,
        broken,
        commit: None,
    }
}

fn batch(e: postgres::Error) -> Fail {
    Fail::Batch(lost(&e))
}

/// A number as PostgreSQL stores it.
fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// What [`RunUpdate`](crate::RunUpdate) sets on a run's row, with the run as `$1`, its lease's
/// token as `$2` and the update's fields as `$3`–`$10`. A status set also marks the run for
/// the next clean to read (`refs_kept`, see `clean.rs`): only a run that stays ended keeps
/// what a clean read of it.
const UPDATE_SETS: &str = "
    status = COALESCE($3::text, status),
    due_at = CASE WHEN $4 THEN $5::bigint ELSE due_at END,
    waiting_on = COALESCE($6::text, waiting_on),
    signal_pending = CASE WHEN $7 THEN EXISTS (
        SELECT 1 FROM signals WHERE run = $1 AND consumed_by IS NULL)
        ELSE signal_pending END,
    ended_at = COALESCE($8::bigint, ended_at),
    output_digest = COALESCE($9::text, output_digest),
    error = COALESCE($10::text, error),
    cancel_requested = CASE
        WHEN $3::text IN ('succeeded', 'failed', 'canceled') THEN FALSE
        WHEN $3::text = 'running' AND status IN ('failed', 'canceled') THEN FALSE
        ELSE cancel_requested END,
    refs_kept = CASE WHEN $3::text IS NULL THEN refs_kept ELSE FALSE END";

/// What a release sets: nobody holds the run.
const RELEASE_SETS: &str = "lease_owner = NULL, lease_pid = NULL, lease_host = NULL,
    lease_started = NULL, lease_expires_at = NULL";

/// The statement that tells listening workers (`listen.rs`, when the batch commits) of a run
/// let go as `released` that is due or may be before their next poll: a signal or cancel that
/// came while it was held (`reel_due`), or a new timer (`reel_timer`, with its due time, so a
/// worker whose next look comes first does not look for it).
fn release_notify() -> String {
    format!(
        "SELECT CASE WHEN signal_pending OR cancel_requested
            THEN pg_notify('{DUE_CHANNEL}', id)
            ELSE pg_notify('{TIMER_CHANNEL}', due_at::text) END
        FROM released
        WHERE status = 'waiting'
          AND (signal_pending OR cancel_requested OR due_at IS NOT NULL)"
    )
}

/// The statements the writer runs, prepared once per connection.
struct Statements {
    durability: Statement,
    values_lock: Statement,
    values_lock_alone: Statement,
    removed: Statement,
    update_release: Statement,
    value: Statement,
    values: Statement,
    spec: Statement,
    spec_binary: Statement,
    append_many: Statement,
    append_one: Statement,
    update: Statement,
    log: Statement,
    consume: Statement,
    consume_clear: Statement,
    release: Statement,
    why_not: Statement,
    renew: Statement,
    signal: Statement,
}

impl Statements {
    fn prepare(conn: &Pipelined) -> Result<Statements, postgres::Error> {
        // A batch's opening (see `FirstTrip`): how its commit waits for the disk, the
        // values' lock (shared, or alone for a clean), and the count of cleans that
        // removed values, read by the statement after the lock's. The first is set for
        // the session, and sent only when it changes (see `Writer::synchronous`).
        let durability = "SELECT set_config('synchronous_commit', $1, false)";
        let values_lock = format!("SELECT pg_advisory_xact_lock_shared({VALUES_LOCK})");
        let values_lock_alone = format!("SELECT pg_advisory_xact_lock({VALUES_LOCK})");
        let removed = format!(
            "SELECT COALESCE((SELECT value FROM meta WHERE key = '{}'), 0)",
            crate::writer::VALUES_REMOVED
        );
        let value = "INSERT INTO vals (digest, json, size) VALUES ($1, $2, $3)
             ON CONFLICT (digest) DO NOTHING";
        let values = "INSERT INTO vals (digest, json, size)
             SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[])
             ON CONFLICT (digest) DO NOTHING";
        let spec =
            "INSERT INTO specs (digest, json) VALUES ($1, $2) ON CONFLICT (digest) DO NOTHING";
        let spec_binary = "INSERT INTO spec_binaries (digest, layout, bytes) VALUES ($1, $2, $3)
             ON CONFLICT (digest) DO UPDATE SET layout = $2, bytes = $3";
        // Fencing and continuity, and the rows, in one statement, for the appends of many
        // runs at once (each run once, its rows following on from its `next_seq`): a
        // run's rows go in only when the row-locking update of the run matched (under
        // READ COMMITTED it waits for a concurrent claim to commit and then re-reads the
        // row). It answers the count of cleans that removed values (as the batch's
        // opening reads it, which this statement can do instead, being after the values'
        // lock) and the runs whose rows went in. With `$13`, only when no clean removed
        // values since that count (see `one_trip_guard`).
        let append_many = format!(
            "WITH input AS (
                SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[])
                    AS i(run, token, first, next)),
             fenced AS (
                UPDATE runs SET next_seq = input.next FROM input
                WHERE runs.id = input.run AND runs.lease_token = input.token
                    AND runs.next_seq = input.first
                    AND ($13::bigint IS NULL OR $13 = COALESCE(
                        (SELECT value FROM meta WHERE key = '{key}'), 0))
                RETURNING runs.id),
             written AS (
                INSERT INTO journal (run, seq, at, kind, step, idx, attempt, data)
                SELECT u.* FROM unnest($5::text[], $6::bigint[], $7::bigint[], $8::text[],
                    $9::text[], $10::bigint[], $11::bigint[], $12::text[])
                    AS u(run, seq, at, kind, step, idx, attempt, data)
                WHERE u.run IN (SELECT id FROM fenced))
             SELECT COALESCE((SELECT value FROM meta WHERE key = '{key}'), 0),
                ARRAY(SELECT id FROM fenced)",
            key = crate::writer::VALUES_REMOVED
        );
        // The same for one run's appends, as a stretch of a sequential run's durable step
        // holds: the run's row found by its key, with no join, which the server runs in
        // less time than `append_many` for one run (58 µs against 83 a run, from
        // `pg_stat_statements` in session 39, when it was also the cure for the per-batch
        // plans that generic plans, `conn::session_settings`, now prevent for both).
        let append_one = format!(
            "WITH fenced AS (
                UPDATE runs SET next_seq = $4
                WHERE id = $1 AND lease_token = $2 AND next_seq = $3
                    AND ($12::bigint IS NULL OR $12 = COALESCE(
                        (SELECT value FROM meta WHERE key = '{key}'), 0))
                RETURNING id),
             written AS (
                INSERT INTO journal (run, seq, at, kind, step, idx, attempt, data)
                SELECT fenced.id, u.* FROM fenced, unnest($5::bigint[], $6::bigint[],
                    $7::text[], $8::text[], $9::bigint[], $10::bigint[], $11::text[])
                    AS u(seq, at, kind, step, idx, attempt, data))
             SELECT COALESCE((SELECT value FROM meta WHERE key = '{key}'), 0),
                ARRAY(SELECT id FROM fenced)",
            key = crate::writer::VALUES_REMOVED
        );
        let update = format!("UPDATE runs SET {UPDATE_SETS} WHERE id = $1 AND lease_token = $2");
        // A run's last update and its release, as one statement: how it ended and that
        // nobody holds it. One row when the lease was still held; `notified` is counted
        // because a CTE that nothing reads is not run.
        let update_release = format!(
            "WITH released AS (
                UPDATE runs SET {UPDATE_SETS}, {RELEASE_SETS}
                WHERE id = $1 AND lease_token = $2
                RETURNING id, status, signal_pending, cancel_requested, due_at),
             notified AS ({notify})
             SELECT id, (SELECT count(*) FROM notified) FROM released",
            notify = release_notify(),
        );
        let log = "WITH held AS (SELECT id FROM runs WHERE id = $1 AND lease_token = $7 FOR SHARE)
             INSERT INTO logs (run, step, idx, attempt, at, text)
             SELECT $1, $2, $3, $4, $5, $6 FROM held";
        let consume =
            "WITH held AS (SELECT id FROM runs WHERE id = $1 AND lease_token = $4 FOR SHARE)
             UPDATE signals SET consumed_by = $3
             WHERE run = $1 AND seq = $2 AND EXISTS (SELECT 1 FROM held)";
        // A signal consumed and the run's mark of signals waiting recomputed, as one
        // statement: the mark's count leaves out the signal consumed, which the
        // statement's snapshot still sees unconsumed. Fenced by the run's update; the
        // counts say which part matched.
        let consume_clear = "WITH fenced AS (
                UPDATE runs SET signal_pending = EXISTS (
                    SELECT 1 FROM signals
                    WHERE run = $1 AND consumed_by IS NULL AND seq <> $2)
                WHERE id = $1 AND lease_token = $4
                RETURNING id),
             consumed AS (
                UPDATE signals SET consumed_by = $3
                WHERE run = $1 AND seq = $2 AND EXISTS (SELECT 1 FROM fenced)
                RETURNING seq)
             SELECT (SELECT count(*) FROM fenced), (SELECT count(*) FROM consumed)";
        let release = format!(
            "WITH released AS (
                UPDATE runs SET {RELEASE_SETS}
                WHERE id = $1 AND lease_token = $2
                RETURNING id, status, signal_pending, cancel_requested, due_at)
             {notify}",
            notify = release_notify(),
        );
        let why_not = "SELECT lease_token, next_seq FROM runs WHERE id = $1";
        let renew = format!(
            "UPDATE runs SET lease_expires_at = {} + $4
             WHERE id = $1 AND lease_token = $2 AND lease_owner IS NOT NULL",
            lease_time(3)
        );
        // A signal numbered and the run marked, in one statement: the mark's update locks
        // the run's row first, so two senders to one run go one after the other. The
        // number is the statement's snapshot's highest plus one, which a sender that
        // waited for the lock finds taken (by the signal committed meanwhile): it inserts
        // nothing then, and `Batch::signal` asks again, with a snapshot that sees it.
        // Listening workers are told when the batch commits. The counts: runs marked,
        // the signal's number (NULL when taken), notifications.
        let signal = format!(
            "WITH marked AS (
                UPDATE runs SET signal_pending = TRUE, refs_kept = FALSE
                WHERE id = $1 RETURNING id),
             sent AS (
                INSERT INTO signals (run, seq, name, payload_digest, sent_at)
                SELECT $1, COALESCE((SELECT MAX(seq) + 1 FROM signals WHERE run = $1), 0),
                    $2, $3, $4
                FROM marked
                ON CONFLICT (run, seq) DO NOTHING
                RETURNING seq)
             SELECT (SELECT count(*) FROM marked), (SELECT seq FROM sent),
                (SELECT count(pg_notify('{DUE_CHANNEL}', $1)) FROM sent)"
        );
        // Sent together, each before the answers to those before it: one round trip rather
        // than one a statement, which every `reel run` on PostgreSQL paid at its start.
        macro_rules! prepared {
            ($($name:ident),* $(,)?) => {{
                let client = conn.client();
                let ($($name,)*) = conn.block_on(async {
                    tokio::try_join!($(client.prepare(&$name)),*)
                })?;
                Statements { $($name),* }
            }};
        }
        Ok(prepared!(
            durability,
            values_lock,
            values_lock_alone,
            removed,
            value,
            values,
            spec,
            spec_binary,
            append_many,
            append_one,
            update,
            update_release,
            log,
            consume,
            consume_clear,
            release,
            why_not,
            renew,
            signal,
        ))
    }
}

/// Starts the writer thread on a connection of its own.
pub(crate) fn spawn(
    connector: Connector,
    rx: crate::writer::queue::Receiver,
    shared: Arc<Shared>,
    clock: Arc<dyn Clock>,
    trips: Arc<AtomicU64>,
) -> Result<JoinHandle<()>, StoreError> {
    std::thread::Builder::new()
        .name("reel-store-pg-writer".to_string())
        .spawn(move || {
            Writer {
                conn: None,
                used: None,
                connector,
                rx,
                shared,
                carry: Vec::new(),
                clock,
                values_removed: None,
                trips,
                synchronous: None,
            }
            .run();
        })
        .map_err(|e| StoreError::Io {
            path: "reel-store-pg-writer".to_string(),
            message: e.to_string(),
        })
}

/// The writer thread's state.
pub(super) struct Writer {
    /// The connection and its statements; `None` after it broke, until reconnected.
    conn: Option<(Pipelined, Statements)>,
    /// When the connection was last handed to a batch.
    used: Option<Instant>,
    connector: Connector,
    rx: crate::writer::queue::Receiver,
    pub(super) shared: Arc<Shared>,
    /// Values from a failed batch, written first in the next one.
    carry: Vec<Cmd>,
    pub(super) clock: Arc<dyn Clock>,
    /// How many cleans had removed values when this writer last looked.
    values_removed: Option<i64>,
    /// Round trips of committed batches (the store's count).
    trips: Arc<AtomicU64>,
    /// Whether the connection's commits wait for the disk (`synchronous_commit`), as its last
    /// committed batch set it: a batch sets it only when it differs (a process's runs are
    /// mostly of one mode), and `None` when unknown.
    synchronous: Option<bool>,
}

impl Writer {
    fn run(mut self) {
        // Connected by the first batch, not by the opening: a command that only reads
        // (`reel events`, `reel runs`) never pays for a connection and its prepared statements.
        let mut batch = Vec::new();
        while let Ok(first) = self.rx.recv() {
            self.gather(first, &mut batch);
            self.commit(&mut batch);
        }
        if !self.carry.is_empty() {
            let mut last = std::mem::take(&mut self.carry);
            self.commit(&mut last);
        }
    }

    fn gather(&mut self, first: Cmd, batch: &mut Vec<Cmd>) {
        batch.append(&mut self.carry);
        let mut urgent = first.awaited();
        batch.push(first);
        while batch.len() < MAX_BATCH_COMMANDS {
            match self.rx.try_recv() {
                Ok(cmd) => {
                    urgent |= cmd.awaited();
                    batch.push(cmd);
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        // edge: the linger is I/O timing, not a decision; it reads the monotonic clock.
        #[allow(clippy::disallowed_methods)]
        let deadline = Instant::now() + LINGER;
        while !urgent && batch.len() < MAX_BATCH_COMMANDS {
            #[allow(clippy::disallowed_methods)]
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match self.rx.recv_timeout(left) {
                Ok(cmd) => {
                    urgent |= cmd.awaited();
                    batch.push(cmd);
                }
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
            Err(lost) => {
                // The session ended and nothing told what became of the batch (`write` has let
                // the connection go), or the batch failed: its runs are poisoned.
                let error = lost.error;
                for cmd in batch.drain(..) {
                    if let Some(tag) = cmd.data_tag() {
                        self.shared.poison(&tag.run, tag.token, error.clone());
                    }
                    match cmd {
                        Cmd::Value { .. } => self.carry.push(cmd),
                        Cmd::Sync { ref tag, .. } | Cmd::Release { ref tag, .. } => {
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

    /// The connection, connecting again when it broke or, after a while unused, no longer
    /// answers (see [`super::conn::CHECK_AFTER_IDLE`]); while the server
    /// is away, connecting is tried again for a while (`Connector::patiently`). Nothing of the
    /// batch that asks has been sent yet.
    fn connection(&mut self) -> Result<&mut (Pipelined, Statements), StoreError> {
        // edge: how long the connection sat unused is I/O timing, not a decision of the
        // engine; it reads the monotonic clock.
        #[allow(clippy::disallowed_methods)]
        let now = Instant::now();
        if let (Some((conn, _)), Some(used)) = (&self.conn, self.used)
            && now.duration_since(used) >= super::conn::CHECK_AFTER_IDLE
            && !conn.answers(super::conn::CHECK_TIMEOUT)
        {
            self.conn = None;
        }
        self.used = Some(now);
        if self.conn.is_none() {
            let connector = &self.connector;
            self.conn = Some(connector.patiently(|| {
                let client = connector.connect_pipelined()?;
                let statements = Statements::prepare(&client).map_err(|e| connector.error(&e))?;
                Ok((client, statements))
            })?);
        }
        Ok(self.conn.as_mut().expect("connected just above"))
    }

    /// Runs the batch in one transaction, again when the server broke a deadlock with it or
    /// ended the session before committing it; a batch the server committed before the
    /// session ended is answered as its runs' rows tell (see [`fate`]).
    fn write(
        &mut self,
        batch: &mut [Cmd],
        durable: bool,
        results: &mut Vec<Result<(), StoreError>>,
    ) -> Result<(), Lost> {
        // edge: the patience is I/O timing, not a decision; it reads the monotonic clock.
        #[allow(clippy::disallowed_methods)]
        let began = Instant::now();
        let mut attempt = 1;
        loop {
            results.clear();
            let lost = match self.try_write(batch, durable, results, true) {
                Ok(()) => return Ok(()),
                Err(lost) if lost.retry && attempt < BATCH_ATTEMPTS => {
                    attempt += 1;
                    continue;
                }
                Err(lost) => lost,
            };
            let ended = lost.broken
                || self
                    .conn
                    .as_ref()
                    .is_some_and(|(c, _)| c.client().is_closed());
            if !ended {
                return Err(lost);
            }
            loop {
                self.conn = None;
                // A server that ends each session before the batch's fate is read (or the
                // batch written again) is there: asked again for the writer's patience.
                if attempt >= BATCH_ATTEMPTS && !self.connector.patient_since(began) {
                    return Err(lost);
                }
                attempt += 1;
                match self.fate(batch, lost.commit) {
                    Ok((Fate::NotWritten, ..)) => break,
                    Ok((Fate::Written(outcomes), now, sent)) => {
                        // Refusals poison their runs, as when the answer came (`settle`).
                        for (cmd, outcome) in batch.iter().zip(&outcomes) {
                            if let (Some(tag), Err(e)) = (cmd.data_tag(), outcome) {
                                self.shared.poison(&tag.run, tag.token, e.clone());
                            }
                        }
                        fate::fill_answers(batch, &now, &sent);
                        *results = outcomes;
                        return Ok(());
                    }
                    // The session that asked ended too: asked again on another.
                    Err(asking) if asking.broken => {}
                    // Unknown, or the server away for longer than the writer waits: the runs
                    // are poisoned with the error the batch met.
                    Ok((Fate::Unknown, ..)) | Err(_) => return Err(lost),
                }
            }
        }
    }

    /// What became of `batch`, whose session ended before its answer was read, from whether
    /// its `COMMIT` went out (`commit`, with its transaction's id when read), what the server
    /// says of that transaction, and its runs' rows and its signals read on a new connection
    /// (see [`fate`]); with what was read: the rows, and the signals found by their command's
    /// place in the batch.
    fn fate(&mut self, batch: &[Cmd], commit: Option<Option<i64>>) -> Result<Told, Lost> {
        let runs = fate::runs_named(batch);
        let signals = fate::signals_tried(batch);
        let (mut now, mut sent) = (HashMap::new(), HashMap::new());
        let xact = match commit {
            None => Xact::NotCommitted,
            Some(None) => Xact::Unknown,
            Some(Some(xid)) => {
                // edge: the patience is I/O timing, not a decision; it reads the monotonic clock.
                #[allow(clippy::disallowed_methods)]
                let began = Instant::now();
                loop {
                    let (conn, _) = self.connection()?;
                    let row = conn
                        .block_on(conn.client().query_one(fate::XACT_STATUS, &[&xid]))
                        .map_err(|e| lost(&e))?;
                    match super::read::get::<Option<String>>(&row, 0)?.as_deref() {
                        Some("committed") => break Xact::Told(true),
                        Some("aborted") => break Xact::Told(false),
                        // The ended session's process has not finished yet (or, behind a
                        // network cut, has not heard yet): asked again on this connection.
                        Some("in progress") if self.connector.patient_since(began) => {
                            std::thread::sleep(IN_PROGRESS_PAUSE);
                        }
                        _ => break Xact::Unknown,
                    }
                }
            }
        };
        let shared = Arc::clone(&self.shared);
        let decided = |now: &HashMap<String, RunNow>, sent: &HashMap<usize, u64>| {
            fate::decide(batch, xact, now, sent, &|run, token| {
                shared.poisoned(run, token)
            })
        };
        if xact == Xact::NotCommitted
            || xact == Xact::Told(false)
            || runs.is_empty() && signals.is_empty()
        {
            return Ok((decided(&now, &sent), now, sent));
        }
        let (conn, _) = self.connection()?;
        if !runs.is_empty() {
            let rows = conn
                .block_on(conn.client().query(fate::RUNS_NOW, &[&runs]))
                .map_err(|e| lost(&e))?;
            for row in rows {
                let read = RunNow {
                    token: super::read::get::<i64>(&row, 1)?.try_into().unwrap_or(0),
                    next_seq: super::read::get::<i64>(&row, 2)?.try_into().unwrap_or(0),
                    owner: super::read::get(&row, 3)?,
                    status: super::read::get(&row, 4)?,
                    durability: super::read::get(&row, 5)?,
                };
                now.insert(super::read::get::<String>(&row, 0)?, read);
            }
        }
        for (at, [run, name, digest], sent_at) in signals {
            let found = conn
                .block_on(
                    conn.client()
                        .query_opt(fate::SIGNAL_SENT, &[&run, &name, &digest, &sent_at]),
                )
                .map_err(|e| lost(&e))?;
            if let Some(row) = found {
                let seq: i64 = super::read::get(&row, 0)?;
                sent.insert(at, u64::try_from(seq).unwrap_or(0));
            }
        }
        Ok((decided(&now, &sent), now, sent))
    }

    /// Writes the batch in one transaction. Its opening, its values and the appends of the
    /// stretch it begins with go out together, in one round trip (see [`Tx::begin`]); so does
    /// its `COMMIT` when `one_trip` allows and nothing else is left to write after them (see
    /// [`one_trip_guard`]): a durable step's whole batch is then one round trip.
    fn try_write(
        &mut self,
        batch: &mut [Cmd],
        durable: bool,
        results: &mut Vec<Result<(), StoreError>>,
        one_trip: bool,
    ) -> Result<(), Lost> {
        let shared = Arc::clone(&self.shared);
        let shared_trips = Arc::clone(&self.trips);
        let clock = Arc::clone(&self.clock);
        let mut values_removed = self.values_removed;
        // Unknown until this batch commits (a transaction that rolls back undoes the setting
        // it made); a new connection has the server's.
        let mut synchronous = self.synchronous.take();
        if self.conn.is_none() {
            synchronous = None;
        }
        // A batch whose fate its runs' rows could not tell, should its session end once its
        // `COMMIT` went out (a log line or a signal alone), reads its transaction's id first
        // and commits in a round trip of its own, so the server can tell (`fate::Xact`).
        let told = fate::told_by_rows(batch);
        let (conn, statements) = self.connection()?;
        // A test's fault (debug builds): the server ends this session before the batch goes
        // out, or once it is committed.
        #[cfg(debug_assertions)]
        let fault = shared.fault.get().and_then(|f| f.session_end(batch));
        #[cfg(debug_assertions)]
        if fault == Some(FaultKind::SessionEnds) {
            end_session(conn);
        }
        let cleaning = batch.iter().any(|c| matches!(c, Cmd::Clean { .. }));
        let first = stretch_from(batch, 0, 1);
        let guard = if one_trip && told {
            one_trip_guard(batch, &shared)
        } else {
            None
        };
        // Only when the first stretch is the whole batch: what a later stretch writes must go
        // in the same transaction, before the `COMMIT`.
        let commit_at_once = guard.is_some() && first == batch.len();
        // The crash point before a commit: the journal rows written and not committed, which
        // the server rolls back when the connection goes; where the first round trip carries
        // the `COMMIT` too, nothing has reached the server yet.
        let journals = cfg!(debug_assertions) && batch.iter().any(Cmd::journals);
        if journals && commit_at_once {
            crate::crash::reached(crate::crash::CrashPoint::BeforeCommit);
        }
        let (tx, removed, appended) = {
            let values = batch_values(batch)?;
            let stretch: Vec<&Cmd> = batch[..first]
                .iter()
                .filter(|c| matches!(c, Cmd::Append { .. }))
                .collect();
            let mut appends = Appends::of(&stretch, &shared);
            appends.guard = guard.flatten();
            let trip = FirstTrip {
                durable: (synchronous != Some(durable)).then_some(durable),
                cleaning,
                values: (!values.digests.is_empty()).then(|| values.params()),
                appends: (!appends.runs.is_empty()).then_some(appends),
                commit: commit_at_once,
                xid: !told,
            };
            Tx::begin(conn, statements, &trip).map_err(|e| match commit_at_once {
                true => lost(&e).committing(None),
                false => lost(&e),
            })?
        };
        if let Some(Some(epoch)) = guard
            && removed != epoch
        {
            // A clean removed values since those the appends name were vouched for: the
            // appends did not go in (their statement's guard), the values did, harmlessly.
            // Written again in two round trips, the appends write those values again first.
            let xid = tx.xid;
            let sent = tx.commit().map_err(|e| lost(&e).committing(xid))?;
            shared_trips.fetch_add(sent, Ordering::Relaxed);
            self.synchronous = Some(durable);
            return self.try_write(batch, durable, results, false);
        }
        {
            let mut run = Batch {
                tx,
                st: statements,
                shared: &shared,
                clock: &*clock,
                removed: values_removed,
            };
            run.shared.notice_removed_values(removed, &mut run.removed);
            let mut at = 0;
            let mut appended = Some(appended);
            while at < batch.len() {
                let end = if at == 0 {
                    first
                } else {
                    stretch_from(batch, at, 2)
                };
                if end > at {
                    let sent = if at == 0 { appended.take() } else { None };
                    run.write_stretch(&mut batch[at..end], sent, results)?;
                    at = end;
                } else {
                    at += run.run_next(&mut batch[at..], results)?;
                }
            }
            values_removed = run.removed;
            if journals && run.tx.open {
                crate::crash::reached(crate::crash::CrashPoint::BeforeCommit);
            }
            let xid = run.tx.xid;
            let sent = run.tx.commit().map_err(|e| lost(&e).committing(xid))?;
            shared_trips.fetch_add(sent, Ordering::Relaxed);
            #[cfg(debug_assertions)]
            if fault == Some(FaultKind::AnswerLost)
                && let Some(e) = end_session(conn)
            {
                return Err(lost(&e).committing(xid));
            }
        }
        self.values_removed = values_removed;
        self.synchronous = Some(durable);
        Ok(())
    }
}

/// How long the writer waits before asking again about a transaction still in progress on a
/// session that ended (see [`Writer::fate`]).
const IN_PROGRESS_PAUSE: Duration = Duration::from_millis(50);

/// A batch's fate, with the runs' rows and the signals it was told by (see [`Writer::fate`]).
type Told = (Fate, HashMap<String, RunNow>, HashMap<usize, u64>);

/// Ends the writer's own session as a server's restart or an administrator would (a test's
/// fault, see `writer::faults`): the error the writer then meets, `None` if the session still
/// answers (the tests that inject the fault check that the session ended).
#[cfg(debug_assertions)]
fn end_session(conn: &Pipelined) -> Option<postgres::Error> {
    let client = conn.client();
    let ended = conn.block_on(client.batch_execute(super::conn::END_OWN_SESSION));
    // The server ends the session as it answers, or the next statement finds it ended.
    ended
        .and_then(|()| conn.block_on(client.batch_execute("SELECT 1")))
        .err()
}

/// Whether `batch` can commit in its first round trip, and on what condition: `None` when it
/// cannot, `Some(None)` when it can, `Some(Some(epoch))` when it can as long as no clean
/// removed values since `epoch` (its appends' statement then checks that, and writes nothing
/// otherwise).
///
/// Only a batch of values, appends and syncs can: its appends are its only writes after its
/// values, and what a refused append leaves to do (asking why) is a read, which can follow the
/// commit. What the appends name and the store vouched for earlier ([`Kept`]) must be written
/// again in the transaction when a clean removed values since, which the batch learns only
/// from its opening's answer; so the appends go in only if no clean did, and the values they
/// name must all have been vouched for since the same clean.
fn one_trip_guard(batch: &[Cmd], shared: &Shared) -> Option<Option<i64>> {
    let mut epoch = None;
    for cmd in batch {
        match cmd {
            Cmd::Value { .. } | Cmd::Sync { .. } => {}
            Cmd::Append { tag, kept, .. } => {
                if shared.poisoned(&tag.run, tag.token).is_some() {
                    continue;
                }
                for k in kept {
                    match epoch {
                        None => epoch = Some(k.epoch),
                        Some(e) if e == k.epoch => {}
                        Some(_) => return None,
                    }
                }
            }
            _ => return None,
        }
    }
    Some(epoch)
}

/// A batch's transaction, counting its round trips to the server: the first sends many
/// statements together ([`Tx::begin`]), each later one a statement (prepared once per
/// connection). Dropped before its commit, it rolls back.
pub(super) struct Tx<'t> {
    conn: &'t Pipelined,
    /// Round trips so far.
    sent: u64,
    /// Whether it is still to be committed or rolled back.
    open: bool,
    /// Its id, when its first round trip read it (see [`fate::Xact`]).
    xid: Option<i64>,
}

/// What a batch's first round trip sends: `BEGIN`, its opening, its values, the appends of the
/// stretch it begins with (see [`stretch_from`]) and, when nothing is left to write after them,
/// `COMMIT`.
///
/// The opening: `fast` keeps its meaning (a commit does not wait for the server's disk; a
/// crash of the server may lose the last moments, a crash of reel loses nothing committed). A
/// batch that may name values takes the values' lock shared, a clean takes it alone, each
/// until its commit; so a clean never removes a value between a writer's look at the count of
/// cleans and the commit of the rows that name it, which PostgreSQL's many writers would
/// otherwise allow (see [`Kept`]). The count is read by the statement after the lock's, so in
/// a snapshot taken once no clean can commit until this batch has.
///
/// A batch that is its appends' statement and nothing else (no values, none named that the
/// store vouched for, the session's durability as it was, and its commit with it: a
/// sequential run's durable step) sends that statement alone, which the server runs as a
/// transaction of its own: its guard is `None`, so it names no value a clean could remove and
/// needs no lock, and the count of cleans it reads only tells this writer of cleans sooner or
/// later, as any look does. `BEGIN`, the lock and `COMMIT` were three more statements for the
/// server to run and answer, about a tenth of such a step's time on the server.
struct FirstTrip<'a> {
    /// Whether the session's commits wait for the disk from now on; `None`: as before.
    durable: Option<bool>,
    cleaning: bool,
    values: Option<[&'a (dyn postgres::types::ToSql + Sync); 3]>,
    appends: Option<Appends<'a>>,
    commit: bool,
    /// Whether the transaction's id is read (see [`fate::Xact`]); never with `commit`.
    xid: bool,
}

impl<'t> Tx<'t> {
    /// Begins a transaction on `conn` with the statements of `first`, all in one round trip:
    /// the server answers them in order, and a statement that fails aborts those after it (a
    /// `COMMIT` then rolls back), as one at a time. The count of cleans that removed values,
    /// and the runs whose appends went in.
    fn begin(
        conn: &'t Pipelined,
        st: &Statements,
        first: &FirstTrip<'_>,
    ) -> Result<(Tx<'t>, i64, Appended), postgres::Error> {
        let client = conn.client();
        let alone = first.commit
            && first.durable.is_none()
            && !first.cleaning
            && first.values.is_none()
            && first.appends.as_ref().is_some_and(|a| a.guard.is_none());
        let began = async {
            match alone {
                true => Ok(()),
                false => client.batch_execute("BEGIN").await,
            }
        };
        let durability = async {
            match first.durable {
                Some(durable) => {
                    let setting = if durable { "on" } else { "off" };
                    client.execute(&st.durability, &[&setting]).await.map(drop)
                }
                None => Ok(()),
            }
        };
        let lock = if first.cleaning {
            &st.values_lock_alone
        } else {
            &st.values_lock
        };
        let locked = async {
            match alone {
                true => Ok(0),
                false => client.execute(lock, &[]).await,
            }
        };
        let xid = async {
            match first.xid {
                true => Some(client.query_one(fate::XACT_ID, &[]).await).transpose(),
                false => Ok(None),
            }
        };
        let values = async {
            match &first.values {
                Some(params) => client.execute(&st.values, params).await.map(drop),
                None => Ok(()),
            }
        };
        // The count of cleans comes with the appends when they go (their statement reads it
        // too), else alone; either way after the values' lock.
        let counted = async {
            match &first.appends {
                Some(a) => {
                    let (statement, params) = a.statement(st);
                    appended_from(&client.query_one(statement, &params).await?)
                }
                None => {
                    let row = client.query_one(&st.removed, &[]).await?;
                    Ok((row.try_get(0)?, Appended::new()))
                }
            }
        };
        let commit = async {
            match first.commit && !alone {
                true => client.batch_execute("COMMIT").await,
                false => Ok(()),
            }
        };
        // Polled together, each request goes out before the answers to those before it come
        // back: `biased` sends them in the order written.
        let (began, set, locked, xid, values, counted, committed) = conn.block_on(async {
            tokio::join!(
                biased;
                began,
                durability,
                locked,
                xid,
                values,
                counted,
                commit,
            )
        });
        let mut tx = Tx {
            conn,
            sent: 1,
            open: !first.commit,
            xid: None,
        };
        // The first failure is the batch's; those after it only say the transaction aborted.
        began?;
        set?;
        locked?;
        tx.xid = xid?.map(|row| row.try_get(0)).transpose()?;
        values?;
        let (removed, written) = counted?;
        committed?;
        Ok((tx, removed, written))
    }

    /// [`tokio_postgres::Client::execute`] in the transaction, counted.
    pub(super) fn execute<T: ?Sized + postgres::ToStatement>(
        &mut self,
        statement: &T,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<u64, postgres::Error> {
        // Only reads follow a commit made in the first round trip (see `one_trip_guard`).
        debug_assert!(self.open, "a write after the batch's commit");
        self.sent += 1;
        self.conn
            .block_on(self.conn.client().execute(statement, params))
    }

    /// [`tokio_postgres::Client::query`] in the transaction, counted.
    pub(super) fn query<T: ?Sized + postgres::ToStatement>(
        &mut self,
        statement: &T,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Vec<postgres::Row>, postgres::Error> {
        self.sent += 1;
        self.conn
            .block_on(self.conn.client().query(statement, params))
    }

    /// [`tokio_postgres::Client::query_one`] in the transaction, counted.
    pub(super) fn query_one<T: ?Sized + postgres::ToStatement>(
        &mut self,
        statement: &T,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<postgres::Row, postgres::Error> {
        self.sent += 1;
        self.conn
            .block_on(self.conn.client().query_one(statement, params))
    }

    /// [`tokio_postgres::Client::query_one`] of `statement` with each of `params`, all sent
    /// in one round trip: the server runs them in order, each seeing what those before it
    /// wrote, and one that fails aborts those after it, as one at a time. Answers in order.
    pub(super) fn query_one_each(
        &mut self,
        statement: &Statement,
        params: &[Vec<&(dyn postgres::types::ToSql + Sync)>],
    ) -> Vec<Result<postgres::Row, postgres::Error>> {
        self.sent += 1;
        let client = self.conn.client();
        self.conn.block_on(futures_util::future::join_all(
            params.iter().map(|p| client.query_one(statement, p)),
        ))
    }

    /// [`tokio_postgres::Client::query_opt`] in the transaction, counted.
    pub(super) fn query_opt<T: ?Sized + postgres::ToStatement>(
        &mut self,
        statement: &T,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Option<postgres::Row>, postgres::Error> {
        self.sent += 1;
        self.conn
            .block_on(self.conn.client().query_opt(statement, params))
    }

    /// Commits, unless its first round trip did; how many round trips it took.
    fn commit(mut self) -> Result<u64, postgres::Error> {
        if !self.open {
            return Ok(self.sent);
        }
        self.open = false;
        self.conn
            .block_on(self.conn.client().batch_execute("COMMIT"))?;
        Ok(self.sent + 1)
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if self.open && !self.conn.client().is_closed() {
            // Best effort: a connection that broke has no transaction left to roll back.
            let _ = self
                .conn
                .block_on(self.conn.client().batch_execute("ROLLBACK"));
        }
    }
}

/// Where the stretch of commands from `at` that [`Batch::write_stretch`] writes ends (`at`
/// when there is none): the writes of runs under their leases (appends, row updates, logs,
/// consumed signals, releases) and the values and syncs between them, holding at least
/// `least` appends, while each run's appends follow on from each other under one lease. Any
/// other command (a run's creation, a claim, a signal sent) ends it and keeps its place.
///
/// Within a batch a stretch holds two appends or more (one alone is as well written by its own
/// statement); the stretch a batch begins with may hold one, since its appends go out in the
/// batch's first round trip (see [`Tx::begin`]).
fn stretch_from(batch: &[Cmd], at: usize, least: usize) -> usize {
    let mut next_of: Vec<(&str, u64, u64)> = Vec::new();
    let (mut end, mut appends) = (at, 0);
    for cmd in &batch[at..] {
        match cmd {
            Cmd::Append {
                tag,
                first_seq,
                rows,
                ..
            } => {
                let next = first_seq + rows.len() as u64;
                match next_of.iter_mut().find(|(run, _, _)| *run == tag.run) {
                    Some(known) if known.1 == tag.token && known.2 == *first_seq => known.2 = next,
                    Some(_) => break,
                    None => next_of.push((&tag.run, tag.token, next)),
                }
                appends += 1;
            }
            Cmd::Value { .. }
            | Cmd::Sync { .. }
            | Cmd::Update { .. }
            | Cmd::Log { .. }
            | Cmd::Consume { .. }
            | Cmd::Release { .. } => {}
            _ => break,
        }
        end += 1;
    }
    if appends >= least.max(1) { end } else { at }
}

/// Every value of a batch, for one statement, sorted by digest (two processes' batches that
/// store the same values then wait for each other in one order, never in a cycle); the value
/// commands themselves then have nothing left to do.
#[derive(Default)]
struct Values<'a> {
    digests: Vec<&'a str>,
    texts: Vec<&'a str>,
    sizes: Vec<i64>,
}

impl Values<'_> {
    /// The parameters of [`Statements::values`].
    fn params(&self) -> [&(dyn postgres::types::ToSql + Sync); 3] {
        [&self.digests, &self.texts, &self.sizes]
    }
}

/// The values of `batch`'s value commands (see [`Values`]).
fn batch_values(batch: &[Cmd]) -> Result<Values<'_>, Lost> {
    let mut values: Vec<(&str, &str, i64)> = Vec::new();
    for cmd in batch {
        if let Cmd::Value { digest, text, size } = cmd {
            let ValueText::Inline(text) = text else {
                return Err(StoreError::Postgres(format!(
                    "value {digest} was not handed over whole"
                ))
                .into());
            };
            values.push((digest, text, *size));
        }
    }
    values.sort_unstable_by(|a, b| a.0.cmp(b.0));
    values.dedup_by(|a, b| a.0 == b.0);
    Ok(Values {
        digests: values.iter().map(|v| v.0).collect(),
        texts: values.iter().map(|v| v.1).collect(),
        sizes: values.iter().map(|v| v.2).collect(),
    })
}

/// The runs whose appends a stretch's statement wrote.
type Appended = std::collections::HashSet<String>;

/// The count of cleans and the runs in the answer of [`Statements::append_many`] or
/// [`Statements::append_one`].
fn appended_from(row: &postgres::Row) -> Result<(i64, Appended), postgres::Error> {
    let runs: Vec<String> = row.try_get(1)?;
    Ok((row.try_get(0)?, runs.into_iter().collect()))
}

/// The arrays of a stretch's appends (see [`Appends::statement`]): one entry per run, and one per
/// row.
#[derive(Default)]
struct Appends<'a> {
    /// The count of cleans the appends go in under (see [`one_trip_guard`]).
    guard: Option<i64>,
    runs: Vec<&'a str>,
    tokens: Vec<i64>,
    firsts: Vec<i64>,
    nexts: Vec<i64>,
    row_runs: Vec<&'a str>,
    seqs: Vec<i64>,
    at: Vec<i64>,
    kind: Vec<&'a str>,
    step: Vec<Option<&'a str>>,
    idx: Vec<Option<i64>>,
    attempt: Vec<Option<i64>>,
    data: Vec<&'a str>,
}

impl<'a> Appends<'a> {
    /// The appends of `stretch` that go in, each run once with its rows in order (runs
    /// already poisoned write nothing, as one by one).
    fn of(stretch: &[&'a Cmd], shared: &Shared) -> Appends<'a> {
        let mut groups: Vec<(&'a Tag, u64, Vec<&'a Row>)> = Vec::new();
        for cmd in stretch {
            if let Cmd::Append {
                tag,
                first_seq,
                rows,
                ..
            } = cmd
            {
                if shared.poisoned(&tag.run, tag.token).is_some() {
                    continue;
                }
                match groups.iter_mut().find(|g| g.0.run == tag.run) {
                    Some(group) => group.2.extend(rows.iter()),
                    None => groups.push((tag, *first_seq, rows.iter().collect())),
                }
            }
        }
        let mut params = Appends::default();
        for (tag, first, rows) in &groups {
            params.push(tag, *first, rows.iter().copied());
        }
        params
    }

    /// The rows of one run's append, from `first` on.
    fn one(tag: &'a Tag, first: u64, rows: &'a [Row]) -> Appends<'a> {
        let mut params = Appends::default();
        params.push(tag, first, rows.iter());
        params
    }

    /// Adds a run's rows, numbered from `first`.
    fn push(&mut self, tag: &'a Tag, first: u64, rows: impl ExactSizeIterator<Item = &'a Row>) {
        let next = first + rows.len() as u64;
        self.runs.push(tag.run.as_str());
        self.tokens.push(int(tag.token));
        self.firsts.push(int(first));
        self.nexts.push(int(next));
        for (seq, row) in (first..next).zip(rows) {
            self.row_runs.push(tag.run.as_str());
            self.seqs.push(int(seq));
            self.at.push(row.at);
            self.kind.push(row.kind.as_str());
            self.step.push(row.step.as_deref());
            self.idx.push(row.index.map(i64::from));
            self.attempt.push(row.attempt.map(i64::from));
            self.data.push(row.data.as_str());
        }
    }

    /// The statement that writes them: [`Statements::append_one`] for one run's, else
    /// [`Statements::append_many`]; and its parameters.
    fn statement<'s>(
        &self,
        st: &'s Statements,
    ) -> (&'s Statement, Vec<&(dyn postgres::types::ToSql + Sync)>) {
        let rows: [&(dyn postgres::types::ToSql + Sync); 7] = [
            &self.seqs,
            &self.at,
            &self.kind,
            &self.step,
            &self.idx,
            &self.attempt,
            &self.data,
        ];
        let (statement, mut params): (_, Vec<&(dyn postgres::types::ToSql + Sync)>) =
            match (&*self.runs, &*self.tokens, &*self.firsts, &*self.nexts) {
                ([run], [token], [first], [next]) => {
                    (&st.append_one, vec![run, token, first, next])
                }
                _ => (
                    &st.append_many,
                    vec![
                        &self.runs,
                        &self.tokens,
                        &self.firsts,
                        &self.nexts,
                        &self.row_runs,
                    ],
                ),
            };
        params.extend(rows);
        params.push(&self.guard);
        (statement, params)
    }
}

/// One batch's transaction and what its commands need.
pub(super) struct Batch<'a, 't> {
    pub(super) tx: Tx<'t>,
    st: &'a Statements,
    pub(super) shared: &'a Shared,
    pub(super) clock: &'a dyn Clock,
    /// How many cleans had removed values, as this batch last read it.
    pub(super) removed: Option<i64>,
}

impl Batch<'_, '_> {
    /// Writes again what rows name and a clean may have removed since the store vouched for
    /// it (see [`Kept`]).
    fn keep(&mut self, kept: &[Kept]) -> Result<(), Fail> {
        for k in kept.iter().filter(|k| k.stale(self.removed)) {
            if k.spec {
                self.tx
                    .execute(&self.st.spec, &[&k.digest, &&*k.text])
                    .map_err(batch)?;
            } else {
                let size = i64::try_from(k.text.len()).unwrap_or(i64::MAX);
                self.tx
                    .execute(&self.st.value, &[&k.digest, &&*k.text, &size])
                    .map_err(batch)?;
            }
        }
        Ok(())
    }

    /// Runs a stretch of the batch that [`stretch_from`] found: its appends first, in one
    /// statement, then its other commands in their order, each answered in its place. The
    /// order within a run changes nothing that commits: every write of a run checks only its
    /// lease's token, which none of them changes, and the transaction commits all or nothing.
    /// Many short runs each append, mark a signal consumed, update their row and append again
    /// in one batch; one by one their appends were a third of a batch's statements.
    ///
    /// An append refused poisons its run before the run's other commands in the stretch, so
    /// they are refused too, as the writes after a refused one always are.
    ///
    /// `sent`: what the appends' statement answered when the batch's first round trip sent it
    /// already (see [`Tx::begin`]).
    fn write_stretch(
        &mut self,
        stretch: &mut [Cmd],
        sent: Option<Appended>,
        results: &mut Vec<Result<(), StoreError>>,
    ) -> Result<(), Lost> {
        let mut appended = Vec::new();
        {
            let appends: Vec<&Cmd> = stretch
                .iter()
                .filter(|c| matches!(c, Cmd::Append { .. }))
                .collect();
            let written = match sent {
                Some(written) => written,
                None => self.append_together(&appends)?,
            };
            self.answer_appends(&appends, &written, &mut appended)?;
        }
        let mut appended = appended.into_iter();
        let mut at = 0;
        while at < stretch.len() {
            if matches!(stretch[at], Cmd::Append { .. }) {
                results.push(
                    appended
                        .next()
                        .expect("append_together answers each append"),
                );
                at += 1;
                continue;
            }
            let upto = stretch[at..]
                .iter()
                .position(|c| matches!(c, Cmd::Append { .. }))
                .map_or(stretch.len(), |n| at + n);
            at += self.run_next(&mut stretch[at..upto], results)?;
        }
        Ok(())
    }

    /// Runs the first of `cmds` as [`Self::run_in_batch`] does, or the first two together
    /// when they are a run's update and then its release under the same lease (how a run
    /// ends or parks), or a signal consumed and then the run's mark recomputed (how a run
    /// takes a signal): one statement instead of two. How many it ran.
    fn run_next(
        &mut self,
        cmds: &mut [Cmd],
        results: &mut Vec<Result<(), StoreError>>,
    ) -> Result<usize, Lost> {
        let signals = cmds
            .iter()
            .take_while(|c| matches!(c, Cmd::Signal { .. }))
            .count();
        if signals >= 2 {
            self.signal_together(&mut cmds[..signals], results)?;
            return Ok(signals);
        }
        if let [
            Cmd::Consume { tag, seq, by },
            Cmd::Update {
                tag: updated,
                update,
            },
            ..,
        ] = &*cmds
            && updated.run == tag.run
            && updated.token == tag.token
            && update.only_clears_signal_pending()
            && self.shared.poisoned(&tag.run, tag.token).is_none()
        {
            let outcome = self.consume_clear(tag, *seq, *by);
            let result = self.settle(tag, outcome)?;
            results.push(result.clone());
            results.push(result);
            return Ok(2);
        }
        if let [
            Cmd::Update { tag, update },
            Cmd::Release { tag: released, .. },
            ..,
        ] = &*cmds
            && released.run == tag.run
            && released.token == tag.token
            && self.shared.poisoned(&tag.run, tag.token).is_none()
        {
            let outcome = self.update(tag, update, true);
            let result = self.settle(tag, outcome)?;
            results.push(result.clone());
            results.push(result);
            return Ok(2);
        }
        results.push(self.run_in_batch(&mut cmds[0])?);
        Ok(1)
    }

    /// Writes `appends` (each run's following on from each other) in one statement; the runs
    /// whose rows went in.
    fn append_together(&mut self, stretch: &[&Cmd]) -> Result<Appended, Lost> {
        let appends = Appends::of(stretch, self.shared);
        if appends.runs.is_empty() {
            return Ok(Appended::new());
        }
        let (statement, params) = appends.statement(self.st);
        let row = self
            .tx
            .query_one(statement, &params)
            .map_err(|e| lost(&e))?;
        let (_, written) = appended_from(&row).map_err(|e| lost(&e))?;
        Ok(written)
    }

    /// Answers each of `stretch`'s appends in its order, as [`Self::run_in_batch`] would one
    /// by one, from the runs whose rows went in.
    fn answer_appends(
        &mut self,
        stretch: &[&Cmd],
        written: &Appended,
        results: &mut Vec<Result<(), StoreError>>,
    ) -> Result<(), Lost> {
        for cmd in stretch {
            let result = match cmd {
                Cmd::Append {
                    tag,
                    first_seq,
                    kept,
                    ..
                } => {
                    let outcome = match self.shared.poisoned(&tag.run, tag.token) {
                        Some(e) => Err(Fail::Command(e)),
                        None if written.contains(&tag.run) => self.keep(kept),
                        None => self
                            .why_not(&tag.run, tag.token, |found| StoreError::Continuity {
                                run: tag.run.clone(),
                                expected: *first_seq,
                                found,
                            })
                            .and_then(|e| Err(Fail::Command(e))),
                    };
                    self.settle(tag, outcome)?
                }
                // Only appends are handed in.
                _ => Ok(()),
            };
            results.push(result);
        }
        Ok(())
    }

    /// Runs one command unless its run is poisoned: `Ok(outcome)` for the command alone, `Err`
    /// when the transaction is lost.
    fn run_in_batch(&mut self, cmd: &mut Cmd) -> Result<Result<(), StoreError>, Lost> {
        match cmd {
            // Written with the batch's other values, before its first command.
            Cmd::Value { .. } => return Ok(Ok(())),
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
        if let Some(e) = &poisoned
            && !matches!(cmd, Cmd::Release { .. })
        {
            return Ok(Err(e.clone()));
        }
        let outcome = self.exec(cmd);
        let settled = match cmd.data_tag() {
            Some(tag) => self.settle(tag, outcome)?,
            None => match outcome {
                Ok(()) => Ok(()),
                Err(Fail::Batch(e)) => return Err(e),
                Err(Fail::Command(e)) => Err(e),
            },
        };
        Ok(settled.and(poisoned.map_or(Ok(()), Err)))
    }

    /// A run's command's outcome as its answer: a refusal poisons the run (its later writes
    /// are refused too); `Err` when the transaction is lost.
    fn settle(&self, tag: &Tag, outcome: Result<(), Fail>) -> Result<Result<(), StoreError>, Lost> {
        match outcome {
            Ok(()) => Ok(Ok(())),
            Err(Fail::Batch(e)) => Err(e),
            Err(Fail::Command(e)) => {
                self.shared.poison(&tag.run, tag.token, e.clone());
                Ok(Err(e))
            }
        }
    }

    /// Why a fenced statement matched no row: no run, a lost lease, or (`other`) something
    /// the statement itself knows.
    fn why_not(
        &mut self,
        run: &str,
        token: u64,
        other: impl FnOnce(u64) -> StoreError,
    ) -> Result<StoreError, Fail> {
        let row = self
            .tx
            .query_opt(&self.st.why_not, &[&run])
            .map_err(batch)?;
        Ok(match row {
            None => StoreError::NotFound(run.to_string()),
            Some(r) if r.get::<_, i64>(0) != int(token) => lease_lost(run),
            Some(r) => other(u64::try_from(r.get::<_, i64>(1)).unwrap_or(0)),
        })
    }

    fn exec(&mut self, cmd: &mut Cmd) -> Result<(), Fail> {
        match cmd {
            Cmd::Value { .. } | Cmd::Sync { .. } => Ok(()),
            Cmd::SpecBinary {
                digest,
                layout,
                bytes,
            } => {
                let layout = i32::try_from(*layout).unwrap_or(i32::MAX);
                self.tx
                    .execute(&self.st.spec_binary, &[&*digest, &layout, &&**bytes])
                    .map_err(batch)?;
                Ok(())
            }
            Cmd::Spec { digest, json, .. } => {
                self.tx
                    .execute(&self.st.spec, &[&*digest, &&**json])
                    .map_err(batch)?;
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
            Cmd::Update { tag, update } => self.update(tag, update, false),
            Cmd::Log { tag, log } => {
                let changed = self
                    .tx
                    .execute(
                        &self.st.log,
                        &[
                            &tag.run,
                            &log.step,
                            &log.index.map(i64::from),
                            &i64::from(log.attempt),
                            &log.at,
                            &log.text,
                            &int(tag.token),
                        ],
                    )
                    .map_err(batch)?;
                if changed == 0 {
                    let run = tag.run.clone();
                    return Err(self.why_not(&run, tag.token, |_| lease_lost(&run))?.into());
                }
                Ok(())
            }
            Cmd::Consume { tag, seq, by } => {
                let changed = self
                    .tx
                    .execute(
                        &self.st.consume,
                        &[&tag.run, &int(*seq), &int(*by), &int(tag.token)],
                    )
                    .map_err(batch)?;
                if changed == 0 {
                    let (run, seq) = (tag.run.clone(), *seq);
                    return Err(self
                        .why_not(&run, tag.token, |_| {
                            StoreError::Postgres(format!("run {run} has no signal {seq}"))
                        })?
                        .into());
                }
                Ok(())
            }
            Cmd::Release { tag, .. } => {
                self.tx
                    .execute(&self.st.release, &[&tag.run, &int(tag.token)])
                    .map_err(batch)?;
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
                let tag = Tag {
                    run: run.id.clone(),
                    token: 1,
                    durable: run.durability == Durability::Durable,
                };
                if !rows.is_empty() {
                    // The run's row was written: a refusal now takes the batch with it.
                    self.append(&tag, 0, rows).map_err(|e| match e {
                        Fail::Command(e) => Fail::Batch(e.into()),
                        lost => lost,
                    })?;
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
                let changed = self
                    .tx
                    .execute(
                        &self.st.renew,
                        &[
                            &tag.run,
                            &int(tag.token),
                            &lease_now(self.clock),
                            &int(*lease_ms),
                        ],
                    )
                    .map_err(batch)?;
                if changed == 0 {
                    let run = tag.run.clone();
                    return Err(self.why_not(&run, tag.token, |_| lease_lost(&run))?.into());
                }
                Ok(())
            }
            Cmd::Signal {
                run,
                name,
                payload,
                seq,
                sent_at,
                ..
            } => {
                let at = *sent_at.get_or_insert_with(|| self.clock.now_ms());
                *seq = self.signal(run, name, &payload.digest, at)?;
                self.keep(std::slice::from_ref(payload))
            }
            // Every value lives in the database: a clean leaves no file behind.
            Cmd::Unlink { .. } => Ok(()),
            Cmd::Clean {
                scope,
                dry_run,
                out,
                ..
            } => {
                let plan = self.clean(scope, *dry_run)?;
                *out = (plan, Vec::new());
                Ok(())
            }
            Cmd::Cancel { run, done, .. } => {
                let changed = self
                    .tx
                    .execute(
                        "UPDATE runs SET cancel_requested = TRUE
                         WHERE id = $1 AND status NOT IN ('succeeded', 'failed', 'canceled')",
                        &[&*run],
                    )
                    .map_err(batch)?;
                *done = changed > 0;
                if *done {
                    self.notify_due(run)?;
                }
                if !*done && !self.exists(run)? {
                    return Err(StoreError::NotFound(run.clone()).into());
                }
                Ok(())
            }
        }
    }

    fn exists(&mut self, run: &str) -> Result<bool, Fail> {
        Ok(self
            .tx
            .query_one("SELECT EXISTS (SELECT 1 FROM runs WHERE id = $1)", &[&run])
            .map_err(batch)?
            .get(0))
    }

    fn append(&mut self, tag: &Tag, first_seq: u64, rows: &[Row]) -> Result<(), Fail> {
        if rows.is_empty() {
            return Ok(());
        }
        // Fencing and continuity in the same row-locking statement as the rows.
        let appends = Appends::one(tag, first_seq, rows);
        let (statement, params) = appends.statement(self.st);
        let row = self.tx.query_one(statement, &params).map_err(batch)?;
        let (_, written) = appended_from(&row).map_err(batch)?;
        if written.is_empty() {
            return Err(Fail::Command(self.why_not(
                &tag.run,
                tag.token,
                |found| StoreError::Continuity {
                    run: tag.run.clone(),
                    expected: first_seq,
                    found,
                },
            )?));
        }
        Ok(())
    }

    /// Consumes signal `seq` of the run (by its event `by`) and recomputes the run's mark of
    /// signals waiting, in one statement; refused as the two would be one after the other.
    fn consume_clear(&mut self, tag: &Tag, seq: u64, by: u64) -> Result<(), Fail> {
        let row = self
            .tx
            .query_one(
                &self.st.consume_clear,
                &[&tag.run, &int(seq), &int(by), &int(tag.token)],
            )
            .map_err(batch)?;
        let (fenced, consumed): (i64, i64) = (row.get(0), row.get(1));
        if fenced == 0 {
            return Err(Fail::Command(
                self.why_not(&tag.run, tag.token, |_| lease_lost(&tag.run))?,
            ));
        }
        if consumed == 0 {
            return Err(Fail::Command(StoreError::Postgres(format!(
                "run {} has no signal {seq}",
                tag.run
            ))));
        }
        Ok(())
    }

    /// Changes the run's row, and with `release` gives its lease up in the same statement.
    fn update(&mut self, tag: &Tag, u: &Update, release: bool) -> Result<(), Fail> {
        let params: [&(dyn postgres::types::ToSql + Sync); 10] = [
            &tag.run,
            &int(tag.token),
            &u.status,
            &u.due_at.is_some(),
            &u.due_at.flatten(),
            &u.waiting_on,
            &u.clear_signal_pending,
            &u.ended_at,
            &u.output_digest,
            &u.error,
        ];
        let changed = if release {
            self.tx
                .query(&self.st.update_release, &params)
                .map_err(batch)?
                .len() as u64
        } else {
            self.tx.execute(&self.st.update, &params).map_err(batch)?
        };
        if changed == 0 {
            return Err(Fail::Command(
                self.why_not(&tag.run, tag.token, |_| lease_lost(&tag.run))?,
            ));
        }
        Ok(())
    }

    fn create(&mut self, run: &NewRun, owner: &Owner, lease_ms: u64) -> Result<(), Fail> {
        // ON CONFLICT keeps the transaction alive when the id is taken, so the refusal fails
        // this command alone.
        let inserted = self
            .tx
            .execute(
                &format!(
                    "INSERT INTO runs (id, flow, flow_digest, source, source_abs, cwd, parent,
                        status, created_at, keep_for_ms, durability, lease_owner, lease_pid,
                        lease_host, lease_started, lease_expires_at, lease_token, next_seq)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, 'running', $8, $9, $10, $11, $12, $13,
                        $14, {} + $16, 1, 0)
                     ON CONFLICT (id) DO NOTHING",
                    lease_time(15)
                ),
                &[
                    &run.id,
                    &run.flow,
                    &run.flow_digest,
                    &run.source,
                    &run.source_abs,
                    &run.cwd,
                    &run.parent,
                    &run.created_at,
                    &run.keep_for_ms.map(int),
                    &durability_str(run.durability),
                    &owner.id,
                    &i64::from(owner.pid),
                    &owner.host,
                    &int(owner.started),
                    &lease_now(self.clock),
                    &int(lease_ms),
                ],
            )
            .map_err(batch)?;
        if inserted == 0 {
            return Err(Fail::Command(StoreError::Postgres(format!(
                "run {} already exists",
                run.id
            ))));
        }
        Ok(())
    }

    fn claim(&mut self, run: &str, owner: &Owner, lease_ms: u64) -> Result<ClaimOut, Fail> {
        // FOR UPDATE: two claimers of one run take turns, and the second sees the first's
        // lease (and its token) once it has committed. (A worker claims with SKIP LOCKED
        // instead, `claim.rs`; this is `reel resume`'s claim of one run, and a worker's of a
        // run whose holder died on this host.) The lease is judged by the time read once the
        // row is locked.
        let row = self
            .tx
            .query_opt(
                "SELECT lease_owner, lease_pid, lease_host, lease_started, lease_expires_at,
                    lease_token, next_seq, durability
                 FROM runs WHERE id = $1 FOR UPDATE",
                &[&run],
            )
            .map_err(batch)?;
        let now: i64 = self
            .tx
            .query_one(
                &format!("SELECT {}", lease_time(1)),
                &[&lease_now(self.clock)],
            )
            .map_err(batch)?
            .get(0);
        let Some(row) = row else {
            return Ok(ClaimOut::NotFound);
        };
        let holder = super::read::owner_at(&row, 0);
        let expires: Option<i64> = row.get(4);
        let token: i64 = row.get(5);
        let next_seq: i64 = row.get(6);
        let durability: String = row.get(7);
        if let Some(holder) = holder
            && expires.is_some_and(|e| e > now)
            && !holder.is_dead()
        {
            return Ok(ClaimOut::HeldBy(holder));
        }
        let expires = now.saturating_add(int(lease_ms));
        self.tx
            .execute(
                "UPDATE runs SET lease_owner = $2, lease_pid = $3, lease_host = $4,
                    lease_started = $5, lease_expires_at = $6, lease_token = lease_token + 1,
                    status = CASE status WHEN 'waiting' THEN 'running' ELSE status END
                 WHERE id = $1",
                &[
                    &run,
                    &owner.id,
                    &i64::from(owner.pid),
                    &owner.host,
                    &int(owner.started),
                    &expires,
                ],
            )
            .map_err(batch)?;
        Ok(ClaimOut::Claimed {
            token: u64::try_from(token).unwrap_or(0) + 1,
            next_seq: u64::try_from(next_seq).unwrap_or(0),
            durability: crate::writer::parse_durability(&durability),
        })
    }

    fn signal(&mut self, run: &str, name: &str, digest: &str, at: i64) -> Result<u64, Fail> {
        // Asked again only when another sender's signal took the number (see `signal` in
        // `Statements`): the second try's snapshot sees it, so two tries are all it takes;
        // more are an error rather than a loop.
        for _ in 0..SIGNAL_TRIES {
            let row = self
                .tx
                .query_one(&self.st.signal, &[&run, &name, &digest, &at])
                .map_err(batch)?;
            if let Some(seq) = signal_numbered(run, &row)? {
                return Ok(seq);
            }
        }
        Err(Fail::Command(StoreError::Postgres(format!(
            "run {run}: no number left for a signal after {SIGNAL_TRIES} tries"
        ))))
    }

    /// Sends the signals of `cmds` (each a [`Cmd::Signal`]) in one round trip, each numbered
    /// and answered as [`Self::signal`] would one by one: many senders' signals that wait
    /// together (a service signalling runs from many threads through one store) cost the
    /// batch one round trip rather than one each. A signal whose number another sender's took
    /// meanwhile is numbered again alone, after the others.
    fn signal_together(
        &mut self,
        cmds: &mut [Cmd],
        results: &mut Vec<Result<(), StoreError>>,
    ) -> Result<(), Lost> {
        let mut sent: Vec<(&str, &str, &Kept, i64)> = Vec::with_capacity(cmds.len());
        for cmd in cmds.iter_mut() {
            if let Cmd::Signal {
                run,
                name,
                payload,
                sent_at,
                ..
            } = cmd
            {
                let at = *sent_at.get_or_insert_with(|| self.clock.now_ms());
                sent.push((run.as_str(), name.as_str(), payload, at));
            }
        }
        let params: Vec<Vec<&(dyn postgres::types::ToSql + Sync)>> = sent
            .iter()
            .map(|(run, name, payload, at)| {
                vec![
                    run as &(dyn postgres::types::ToSql + Sync),
                    name,
                    &payload.digest,
                    at,
                ]
            })
            .collect();
        let answers = self.tx.query_one_each(&self.st.signal, &params);
        // The first failure is the batch's; those after it only say the transaction aborted.
        let mut numbered = Vec::with_capacity(answers.len());
        for ((run, ..), answer) in sent.iter().zip(answers) {
            numbered.push(signal_numbered(run, &answer.map_err(|e| lost(&e))?));
        }
        let mut seqs = Vec::with_capacity(sent.len());
        for ((run, name, payload, at), number) in sent.into_iter().zip(numbered) {
            let outcome = number
                .and_then(|number| match number {
                    Some(seq) => Ok(seq),
                    None => self.signal(run, name, &payload.digest, at),
                })
                .and_then(|seq| self.keep(std::slice::from_ref(payload)).map(|()| seq));
            match outcome {
                Ok(seq) => {
                    seqs.push(seq);
                    results.push(Ok(()));
                }
                Err(Fail::Batch(e)) => return Err(e),
                Err(Fail::Command(e)) => {
                    seqs.push(0);
                    results.push(Err(e));
                }
            }
        }
        for (cmd, number) in cmds.iter_mut().zip(seqs) {
            if let Cmd::Signal { seq, .. } = cmd {
                *seq = number;
            }
        }
        Ok(())
    }

    /// Tells listening workers that `run` may be due; delivered when the batch commits.
    fn notify_due(&mut self, run: &str) -> Result<(), Fail> {
        self.tx
            .execute("SELECT pg_notify($1, $2)", &[&DUE_CHANNEL, &run])
            .map_err(batch)?;
        Ok(())
    }
}

/// What the signal statement answered for `run`: its number, `None` when another sender took
/// the number meanwhile (it is asked again), or the run's absence.
fn signal_numbered(run: &str, row: &postgres::Row) -> Result<Option<u64>, Fail> {
    let marked: i64 = row.get(0);
    if marked == 0 {
        return Err(Fail::Command(StoreError::NotFound(run.to_string())));
    }
    Ok(row
        .get::<_, Option<i64>>(1)
        .map(|seq| u64::try_from(seq).unwrap_or(0)))
}

/// How many times a signal is numbered before its sender gives up (see [`Batch::signal`]).
const SIGNAL_TRIES: usize = 8;

fn lease_lost(run: &str) -> StoreError {
    StoreError::LeaseLost {
        run: run.to_string(),
    }
}

#[cfg(test)]
mod tests;
