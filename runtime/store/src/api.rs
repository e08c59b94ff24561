//! The store's interface and the plain types that cross it.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::task::{Context, Poll};

use reel_flowspec::{FlowSpec, SpecError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How hard a run's writes are pushed to disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Gathers writes for a few milliseconds and commits with `synchronous=NORMAL`: survives a
    /// crash of the process, not a power cut. The engine waits for its writes only where
    /// something else will act on the record.
    #[default]
    Fast,
    /// Commits with `synchronous=FULL` (survives a power cut); the engine also waits for its
    /// record before each call that is not pure and before reporting an ending.
    Durable,
}

/// A run's status, as stored and as `reel runs` prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Held by a live process (or by a dead one whose lease has not been taken over yet).
    Running,
    /// Parked on a timer or a signal; no process needs to hold it.
    Waiting,
    /// Ended with its output.
    Succeeded,
    /// Ended with an error.
    Failed,
    /// Ended by `reel cancel`.
    Canceled,
    /// Set aside as a fault of the platform (a replay diverged).
    Quarantined,
}

impl RunStatus {
    /// The lowercase word.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Waiting => "waiting",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Canceled => "canceled",
            RunStatus::Quarantined => "quarantined",
        }
    }

    /// Parses the lowercase word.
    pub fn parse(s: &str) -> Option<RunStatus> {
        [
            RunStatus::Running,
            RunStatus::Waiting,
            RunStatus::Succeeded,
            RunStatus::Failed,
            RunStatus::Canceled,
            RunStatus::Quarantined,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }

    /// Whether the run has ended (succeeded, failed or canceled).
    pub fn is_ended(self) -> bool {
        matches!(
            self,
            RunStatus::Succeeded | RunStatus::Failed | RunStatus::Canceled
        )
    }
}

/// A process that may hold runs: who holds a lease, and whether it is still alive.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Owner {
    /// Unique per process incarnation: host, pid and process start time.
    pub id: String,
    /// Its process id.
    pub pid: u32,
    /// Its host name.
    pub host: String,
    /// Its start time as the OS reports it (Linux: clock ticks since boot, from /proc), so a
    /// recycled pid is not mistaken for the holder.
    pub started: u64,
}

/// A held lease on a run: the right to append to its journal. Appends check `token`, so a
/// process whose lease was taken over can no longer write (fencing).
#[derive(Debug)]
pub struct Lease {
    /// The run.
    pub run: String,
    /// The fencing token, incremented by every claim.
    pub token: u64,
    /// Who holds it.
    pub owner: Owner,
    /// How the run's writes are made durable.
    pub durability: Durability,
    /// The sequence number the next appended event gets.
    pub next_seq: AtomicU64,
}

/// A value or FlowSpec a store was asked to keep, handed back with the rows that name it.
///
/// Storing a value and appending the rows that name it are two writes; a `reel clean` in
/// another process may commit between them and remove that value, if only the removed runs
/// named it. The rows' write therefore carries what they name: in its transaction, the writer
/// stores each again when a clean removed values since the store last vouched for it (its
/// `epoch`), so rows never commit naming something the store no longer holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Kept {
    /// Its digest.
    pub(crate) digest: String,
    /// Its text (canonical JSON): what is written again if a clean removed it.
    pub(crate) text: std::sync::Arc<str>,
    /// A FlowSpec rather than a value.
    pub(crate) spec: bool,
    /// How many cleans had removed values when the store vouched for it (see
    /// `writer::Epoch`).
    pub(crate) epoch: i64,
}

impl Kept {
    /// Its digest.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Whether it must be written again in a batch that read `count` cleans: one that removed
    /// values committed since the store vouched for it.
    pub(crate) fn stale(&self, count: Option<i64>) -> bool {
        count != Some(self.epoch)
    }
}

/// A new run, created already leased to its creator.
#[derive(Clone, Debug, PartialEq)]
pub struct NewRun {
    /// The run id (unique, sortable by creation time).
    pub id: String,
    /// The flow's name.
    pub flow: String,
    /// The FlowSpec's digest (the spec itself is stored with [`Store::put_spec`]).
    pub flow_digest: String,
    /// The source file's path as the user gave it, if the run started from one.
    pub source: Option<String>,
    /// The absolute path of the source file, used to find a flow's runs from the editor.
    pub source_abs: Option<String>,
    /// The directory the run was started in.
    pub cwd: String,
    /// The run this one was forked from.
    pub parent: Option<String>,
    /// How long the run is kept after it ends, in milliseconds.
    pub keep_for_ms: Option<u64>,
    /// The run's write mode.
    pub durability: Durability,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_at: i64,
    /// The journal's first events, committed with the run: a run is never seen without them.
    pub first_events: Vec<NewEvent>,
    /// The values and FlowSpec those events and the run name, as the store handed them back
    /// (see [`Kept`]); empty when they name nothing stored by this process just before.
    pub kept: Vec<Kept>,
}

/// A stored run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunRow {
    /// The run id.
    pub id: String,
    /// The flow's name.
    pub flow: String,
    /// The FlowSpec's digest.
    pub flow_digest: String,
    /// The source path as given.
    pub source: Option<String>,
    /// The source's absolute path.
    pub source_abs: Option<String>,
    /// The directory the run was started in.
    pub cwd: String,
    /// The run it was forked from.
    pub parent: Option<String>,
    /// Its status.
    pub status: RunStatus,
    /// Creation time (ms since epoch).
    pub created_at: i64,
    /// End time (ms since epoch), once ended.
    pub ended_at: Option<i64>,
    /// When a waiting run's earliest timer is due (ms since epoch).
    pub due_at: Option<i64>,
    /// The signal names a waiting run waits for.
    pub waiting_on: Vec<String>,
    /// Whether a signal arrived that the run has not consumed yet.
    pub signal_pending: bool,
    /// The current lease holder, if any.
    pub lease_owner: Option<Owner>,
    /// When the lease expires (ms since epoch).
    pub lease_expires_at: Option<i64>,
    /// The current fencing token.
    pub lease_token: u64,
    /// Whether `reel cancel` asked for it to stop.
    pub cancel_requested: bool,
    /// The output value's digest, once succeeded.
    pub output_digest: Option<String>,
    /// The error, once failed (JSON: code, message, step, retryable).
    pub error: Option<Value>,
    /// How long it is kept after ending (ms).
    pub keep_for_ms: Option<u64>,
    /// Its write mode.
    pub durability: Durability,
    /// How many events its journal holds.
    pub next_seq: u64,
}

/// Changes to a run's row, written in order with its journal events.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunUpdate {
    /// A new status.
    pub status: Option<RunStatus>,
    /// A new due time (`Some(None)` clears it).
    pub due_at: Option<Option<i64>>,
    /// New signal names waited on.
    pub waiting_on: Option<Vec<String>>,
    /// Clears the pending-signal mark (set when the run consumed what had arrived).
    pub clear_signal_pending: bool,
    /// The end time.
    pub ended_at: Option<i64>,
    /// The output's digest.
    pub output_digest: Option<String>,
    /// The error.
    pub error: Option<Value>,
}

/// An event to append to a run's journal. The store gives it the next sequence number.
#[derive(Clone, Debug, PartialEq)]
pub struct NewEvent {
    /// When it happened (ms since epoch).
    pub at: i64,
    /// Its kind (`run_started`, `step_succeeded`, …).
    pub kind: String,
    /// The step it concerns.
    pub step: Option<String>,
    /// The `foreach` index it concerns.
    pub index: Option<u32>,
    /// The attempt it concerns.
    pub attempt: Option<u32>,
    /// The rest of the event (digests, names, errors): small, values are stored by digest.
    pub data: Value,
}

/// A stored journal event.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EventRow {
    /// The run.
    pub run: String,
    /// Its position in the run's journal, from 0, without gaps.
    pub seq: u64,
    /// When it happened (ms since epoch).
    pub at: i64,
    /// Its kind.
    pub kind: String,
    /// The step it concerns.
    pub step: Option<String>,
    /// The `foreach` index it concerns.
    pub index: Option<u32>,
    /// The attempt it concerns.
    pub attempt: Option<u32>,
    /// The rest of the event.
    pub data: Value,
}

/// A stored journal event as it lies in the store's row buffer: `kind`, `step` and `data` are
/// borrowed, so a reader that decodes the data itself (the journal's typed decoding) makes no
/// copy and no JSON tree of it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RawEventRow<'a> {
    /// Its position in the run's journal, from 0, without gaps.
    pub seq: u64,
    /// When it happened (ms since epoch).
    pub at: i64,
    /// Its kind.
    pub kind: &'a str,
    /// The step it concerns.
    pub step: Option<&'a str>,
    /// The `foreach` index it concerns.
    pub index: Option<u32>,
    /// The attempt it concerns.
    pub attempt: Option<u32>,
    /// The rest of the event, as the JSON text stored.
    pub data: &'a str,
}

impl RawEventRow<'_> {
    /// The row with its data parsed, as [`StoreRead::read_journal_rows`] hands it over; `Err`
    /// says why the data cannot be read (the row is then a hole).
    pub fn to_row(&self, run: &str) -> Result<EventRow, String> {
        Ok(EventRow {
            run: run.to_string(),
            seq: self.seq,
            at: self.at,
            kind: self.kind.to_string(),
            step: self.step.map(str::to_string),
            index: self.index,
            attempt: self.attempt,
            data: serde_json::from_str(self.data)
                .map_err(|e| format!("its data is not JSON: {e}"))?,
        })
    }
}

/// One row of a journal as [`StoreRead::read_journal_raw`] hands it over.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RawJournalRow<'a> {
    /// A row whose columns read; its data is not parsed yet.
    Event(RawEventRow<'a>),
    /// A row that cannot be read (its bytes are corrupt, or it is missing): a hole.
    Hole {
        /// Its position in the journal.
        seq: u64,
        /// Why it cannot be read.
        message: &'a str,
    },
}

/// A FlowSpec as [`StoreRead::flowspec`] read it: the spec (or why its JSON does not read)
/// and the length of the form read, binary or JSON.
pub type SpecAsRead = (Result<FlowSpec, SpecError>, usize);

impl RawJournalRow<'_> {
    /// The row's position in the journal.
    pub fn seq(&self) -> u64 {
        match self {
            RawJournalRow::Event(r) => r.seq,
            RawJournalRow::Hole { seq, .. } => *seq,
        }
    }
}

/// One row of a journal as [`StoreRead::read_journal_rows`] hands it over.
#[derive(Clone, Debug, PartialEq)]
pub enum JournalRow {
    /// A row that reads.
    Event(EventRow),
    /// A row that cannot be read (its bytes are corrupt, or it is missing): a hole.
    Hole {
        /// Its position in the journal.
        seq: u64,
        /// Why it cannot be read.
        message: String,
    },
}

/// What a claim found.
#[derive(Debug)]
pub enum Claim {
    /// The lease is ours.
    Claimed(Lease),
    /// A live process holds it.
    HeldBy(Owner),
    /// No such run.
    NotFound,
}

/// A run [`Store::claim_due`] took for its caller.
#[derive(Debug)]
pub struct DueClaim {
    /// The lease taken.
    pub lease: Lease,
    /// The run's status before the claim (a claim makes a waiting run `running`), to give it
    /// back as it was should the caller not go on with it.
    pub was: RunStatus,
    /// The run's row as the claim left it, read with the claim: a worker goes on from it
    /// without reading it again.
    pub row: Box<RunRow>,
    /// Its journal and pending signals, when the store read them with the claim (a short
    /// run's, on a database: see [`ReadWithClaim`]); `None` leaves them to the claimer.
    pub read: Option<Box<ReadWithClaim>>,
}

/// What a worker's look ([`Store::look`]) found: the runs it claimed, and when it should look
/// again unless woken first.
#[derive(Debug, Default)]
pub struct Look {
    /// The runs claimed, as [`Store::claim_due`] hands them over.
    pub claims: Vec<DueClaim>,
    /// The next due time after the claim, as [`StoreRead::next_due`] tells it.
    pub next_due: Option<i64>,
}

/// A claimed run's journal and pending signals, read by [`Store::claim_due`] for many runs in
/// two statements rather than by each run's resume in two of its own: a worker that takes up
/// a burst of short runs on PostgreSQL otherwise pays two round trips a run for them.
///
/// Read after the claim committed, under the lease it took, so the journal is whole (no other
/// process can append to it); a signal sent after the read is not among `signals`, as one sent
/// after the claimer's own read would not be, and makes the run due again when it parks.
#[derive(Clone, Debug, PartialEq)]
pub struct ReadWithClaim {
    /// Its journal from its first event, as [`StoreRead::read_journal_rows`] hands it over.
    pub journal: Vec<JournalRow>,
    /// Its signals nothing consumed, in the order sent, each with its payload (`None` when
    /// the value is gone), as [`StoreRead::pending_signals_with_payloads`] reads them.
    pub signals: Vec<(SignalRow, Option<Value>)>,
}

/// The lease of a run claimed alone as a [`DueClaim`], with its row read after the claim;
/// `None`, the lease let go, when another claimer ended the run since it was found due (a
/// claim takes an ended run too).
pub(crate) fn due_claim<S: Store + ?Sized>(
    store: &S,
    lease: Lease,
    was: RunStatus,
) -> Result<Option<DueClaim>, StoreError> {
    match store.run(&lease.run)? {
        Some(row) if !row.status.is_ended() => Ok(Some(DueClaim {
            lease,
            was,
            row: Box::new(row),
            read: None,
        })),
        _ => {
            drop(store.release(&lease));
            Ok(None)
        }
    }
}

/// The kind of journal row a resume writes for a call whose outcome it could not know; both
/// stores index rows of this kind ([`StoreRead::unknown_outcome_rows`]).
pub const UNKNOWN_OUTCOME: &str = "unknown_outcome";

/// Filters for listing runs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunFilter {
    /// Only runs with this status.
    pub status: Option<RunStatus>,
    /// Only runs of this flow.
    pub flow: Option<String>,
    /// Only runs started from this absolute source path.
    pub source_abs: Option<String>,
    /// At most this many (newest first).
    pub limit: Option<usize>,
}

/// A signal sent to a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SignalRow {
    /// The run.
    pub run: String,
    /// Its number among the run's signals, from 0.
    pub seq: u64,
    /// The signal's name.
    pub name: String,
    /// The payload's digest.
    pub payload_digest: String,
    /// When it was sent (ms since epoch).
    pub sent_at: i64,
    /// The journal event that consumed it, once consumed.
    pub consumed_by: Option<u64>,
}

/// What a tool printed, kept for `reel logs`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LogRow {
    /// The run.
    pub run: String,
    /// The step.
    pub step: String,
    /// The `foreach` index.
    pub index: Option<u32>,
    /// The attempt.
    pub attempt: u32,
    /// When (ms since epoch).
    pub at: i64,
    /// The text (secrets already scrubbed by the caller).
    pub text: String,
}

/// How long an ended run is kept when its row says nothing (older runs): a week.
pub const DEFAULT_KEEP_FOR_MS: u64 = 7 * 24 * 3600 * 1000;

/// Which ended runs a clean removes. A run that has not ended is never removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CleanScope {
    /// Ended runs whose end plus keep time has passed, by the store's clock.
    Expired,
    /// This run, which must have ended.
    Run(String),
    /// Every ended run, whatever its keep time.
    AllEnded,
}

/// What a clean removed (or, for a dry run, would remove).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Cleaned {
    /// The runs, oldest first.
    pub runs: Vec<String>,
    /// Their journal rows.
    pub events: u64,
    /// Values no remaining run references (stored rows and blob files alike).
    pub values: u64,
    /// Of those values, the ones kept as files under `blobs/`.
    pub blobs: u64,
    /// FlowSpecs no remaining run started with.
    pub specs: u64,
    /// The bytes of those values and FlowSpecs.
    pub bytes: u64,
    /// The remaining runs whose journals were read to know what they reference: those that
    /// have not ended, and the ended ones no clean had read before (an ended run is read once
    /// in its life; what it references is kept for the cleans after).
    pub runs_read: u64,
    /// Whether the database was rewritten to give its free pages back to the file system.
    pub vacuumed: bool,
}

/// A store error, with a stable code.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum StoreError {
    /// The database could not be opened or created.
    #[error("the store at {path} cannot be opened: {message}")]
    Open {
        /// Where.
        path: String,
        /// Why.
        message: String,
    },
    /// SQLite failed.
    #[error("the store failed: {0}")]
    Sqlite(String),
    /// PostgreSQL failed (the message never holds the store URL's password).
    #[error("the store's database failed: {0}")]
    Postgres(String),
    /// The store's server cannot be reached now, or ended the connection (it restarts, an
    /// administrator or an idle timeout ended the session): nothing says the store is wrong,
    /// and a later try, on a new connection, may succeed. The message says which, and never
    /// holds the URL's password.
    #[error("{0}")]
    Unreachable(String),
    /// The disk holding the store is full: nothing more can be written until space is freed.
    #[error(
        "the store's disk is full: {0}; free some space, then continue the run with `reel resume`"
    )]
    DiskFull(String),
    /// The store's files cannot be written (read-only, or not ours).
    #[error("the store's files cannot be written: {0}")]
    Unwritable(String),
    /// Another process holds the run: its lease was lost (fencing).
    #[error("the lease on run {run} was taken over by another process")]
    LeaseLost {
        /// The run.
        run: String,
    },
    /// A journal row cannot be read: the run has a hole and cannot resume.
    #[error("run {run} has an unreadable journal row at {seq}: {message}")]
    Hole {
        /// The run.
        run: String,
        /// The row.
        seq: u64,
        /// Why.
        message: String,
    },
    /// No such run.
    #[error("there is no run {0}")]
    NotFound(String),
    /// The run has not ended, so it cannot be removed.
    #[error(
        "run {run} is {status}, not ended: only succeeded, failed or canceled runs are removed"
    )]
    NotEnded {
        /// The run.
        run: String,
        /// Its status.
        status: String,
    },
    /// A value or spec is missing (or its blob file is).
    #[error("the value {digest} is missing from the store")]
    MissingValue {
        /// Its digest.
        digest: String,
    },
    /// A stored value's bytes do not match its digest (or are not JSON): the store was
    /// damaged, and the value cannot be used.
    #[error("the value {digest} is damaged in the store: its bytes do not match its digest")]
    CorruptValue {
        /// Its digest.
        digest: String,
    },
    /// An earlier write of this run failed, so nothing more is written for it.
    #[error("an earlier write of run {run} failed: {message}")]
    Poisoned {
        /// The run.
        run: String,
        /// The first failure.
        message: String,
    },
    /// The store was opened read-only.
    #[error("the store is open read-only")]
    ReadOnly,
    /// A query given to `reel sql` failed: the database's own message.
    #[error("the query failed: {0}")]
    Query(String),
    /// A query given to `reel sql` would write: it runs read-only queries only.
    #[error("the query would change the store ({0}); `reel sql` runs read-only queries only")]
    QueryWrites(String),
    /// A query given to `reel sql` ran past its time limit and was stopped.
    #[error(
        "the query was stopped after {limit}, its time limit: narrow it (WHERE, LIMIT) or give \
         it longer with `--timeout`"
    )]
    QueryTimeout {
        /// The limit, as a duration is written (`60s`).
        limit: String,
    },
    /// A query given to `reel sql` answered more rows than it may.
    #[error(
        "the query answers more than {max} rows: narrow it (WHERE, LIMIT) or allow more with \
         `--max-rows`"
    )]
    QueryRows {
        /// The most rows it may answer.
        max: usize,
    },
    /// The writer thread is gone.
    #[error("the store's writer has stopped")]
    Closed,
    /// An append did not continue the run's journal where the store has it (two writers with
    /// the same lease, or events appended out of order).
    #[error("run {run}'s journal continues at {found}, not at {expected}")]
    Continuity {
        /// The run.
        run: String,
        /// The sequence number the append started at.
        expected: u64,
        /// The sequence number the store expected next.
        found: u64,
    },
    /// A file of the store (a value kept apart) could not be written or read.
    #[error("the store cannot use {path}: {message}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
}

impl StoreError {
    /// The stable code (`store.lease-lost`, …).
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::Open { .. } => "store.open",
            StoreError::Sqlite(_) => "store.sqlite",
            StoreError::Postgres(_) => "store.postgres",
            StoreError::Unreachable(_) => "store.unreachable",
            StoreError::DiskFull(_) => "store.disk-full",
            StoreError::Unwritable(_) => "store.unwritable",
            StoreError::LeaseLost { .. } => "store.lease-lost",
            StoreError::Hole { .. } => "store.hole",
            StoreError::NotFound(_) => "store.not-found",
            StoreError::NotEnded { .. } => "store.not-ended",
            StoreError::MissingValue { .. } => "store.missing-value",
            StoreError::CorruptValue { .. } => "store.corrupt-value",
            StoreError::Poisoned { .. } => "store.poisoned",
            StoreError::ReadOnly => "store.read-only",
            StoreError::Query(_) => "store.query",
            StoreError::QueryWrites(_) => "store.query-writes",
            StoreError::QueryTimeout { .. } => "store.query-timeout",
            StoreError::QueryRows { .. } => "store.query-rows",
            StoreError::Closed => "store.closed",
            StoreError::Continuity { .. } => "store.continuity",
            StoreError::Io { .. } => "store.io",
        }
    }

    /// Whether trying again later may succeed without anyone changing anything: the store's
    /// server was away (a long-lived process such as `reel worker` waits and tries again).
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Unreachable(_))
    }
}

/// Resolves when what was enqueued before it is committed.
pub struct Ticket(pub tokio::sync::oneshot::Receiver<Result<(), StoreError>>);

impl Future for Ticket {
    type Output = Result<(), StoreError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(StoreError::Closed)))
    }
}

/// Whether to keep reading the journal.
pub enum Flow {
    /// Read the next row.
    Continue,
    /// Stop here.
    Stop,
}

/// Reading the store: what the language server may do, and all it is given. Reads never wait
/// for the writer; they see what is committed.
pub trait StoreRead: Send + Sync {
    /// A value by name (`reel_flowspec::canonical::name_text`): a short value's name is the
    /// value itself, read without the store; any other's is its digest, looked up with
    /// [`StoreRead::stored_value`].
    fn get_value(&self, name: &str) -> Result<Option<Value>, StoreError> {
        match crate::read::literal_value(name) {
            Some(value) => value.map(Some),
            None => self.stored_value(name),
        }
    }
    /// Values by name, in order: what [`StoreRead::get_value`] gives for each, the stored ones
    /// read together (a replay asks for a round's results at once).
    fn get_values(&self, names: &[&str]) -> Result<Vec<Option<Value>>, StoreError> {
        let literals: Vec<_> = names
            .iter()
            .map(|n| crate::read::literal_value(n))
            .collect();
        if literals.iter().all(Option::is_none) {
            return self.stored_values(names);
        }
        let digests: Vec<&str> = names
            .iter()
            .zip(&literals)
            .filter_map(|(n, l)| l.is_none().then_some(*n))
            .collect();
        let mut stored = if digests.is_empty() {
            Vec::new().into_iter()
        } else {
            self.stored_values(&digests)?.into_iter()
        };
        literals
            .into_iter()
            .map(|l| match l {
                Some(value) => value.map(Some),
                None => Ok(stored.next().flatten()),
            })
            .collect()
    }
    /// A value the store keeps, by digest (a name that is not a digest has none).
    fn stored_value(&self, digest: &str) -> Result<Option<Value>, StoreError>;
    /// Values the store keeps, by digest, in order: what [`StoreRead::stored_value`] gives for
    /// each, read together.
    fn stored_values(&self, digests: &[&str]) -> Result<Vec<Option<Value>>, StoreError> {
        digests.iter().map(|d| self.stored_value(d)).collect()
    }
    /// A FlowSpec's JSON by digest.
    fn get_spec(&self, digest: &str) -> Result<Option<String>, StoreError>;
    /// Hands a FlowSpec's JSON to `read` without copying it out of the store where the store
    /// can (a spec can be tens of MiB); false when there is none.
    fn read_spec(&self, digest: &str, read: &mut dyn FnMut(&str)) -> Result<bool, StoreError> {
        Ok(self.get_spec(digest)?.map(|json| read(&json)).is_some())
    }
    /// The FlowSpec `digest`, read where the store holds it (a spec of many steps is tens of
    /// MiB of JSON, so it is not copied out first): from its binary form when the store keeps
    /// one in this build's layout that reads whole as the spec it names, else parsed from its
    /// JSON; with the length of the form read. `None` when the store has no such spec.
    fn flowspec(&self, digest: &str) -> Result<Option<SpecAsRead>, StoreError> {
        let mut read = None;
        self.read_spec_binary(digest, &mut |bytes| {
            read = FlowSpec::from_binary(bytes)
                .filter(|spec| spec.digest == digest)
                .map(|spec| (Ok(spec), bytes.len()));
        })?;
        if read.is_none() {
            self.read_spec(digest, &mut |json| {
                read = Some((FlowSpec::from_json(json), json.len()));
            })?;
        }
        Ok(read)
    }
    /// Hands the binary form the store keeps beside a FlowSpec's JSON, in this build's layout
    /// ([`reel_flowspec::FlowSpec::to_binary`], which reads several times faster than the
    /// JSON), to `read` without copying it where the store can; false when there is none, and
    /// the caller reads the JSON. A store may keep no binary forms at all.
    fn read_spec_binary(
        &self,
        _digest: &str,
        _read: &mut dyn FnMut(&[u8]),
    ) -> Result<bool, StoreError> {
        Ok(false)
    }

    /// A run by id.
    fn run(&self, id: &str) -> Result<Option<RunRow>, StoreError>;
    /// The ids of runs starting with `prefix`.
    fn find_runs(&self, prefix: &str) -> Result<Vec<String>, StoreError>;
    /// Runs matching `filter`, newest first.
    fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRow>, StoreError>;
    /// Streams a run's journal in order, without holding it all in memory.
    fn read_journal(
        &self,
        run: &str,
        from_seq: u64,
        f: &mut dyn FnMut(EventRow) -> Flow,
    ) -> Result<(), StoreError>;
    /// Streams a run's journal like [`StoreRead::read_journal`], but hands a row that cannot
    /// be read over as a [`JournalRow::Hole`] and goes on, so a view shows the rest.
    fn read_journal_rows(
        &self,
        run: &str,
        from_seq: u64,
        f: &mut dyn FnMut(JournalRow) -> Flow,
    ) -> Result<(), StoreError> {
        // A store that cannot go past a hole hands over the first one and stops there.
        match self.read_journal(run, from_seq, &mut |row| f(JournalRow::Event(row))) {
            Err(StoreError::Hole { seq, message, .. }) => {
                f(JournalRow::Hole { seq, message });
                Ok(())
            }
            other => other,
        }
    }
    /// Streams a run's journal like [`StoreRead::read_journal_rows`], each row borrowed from
    /// the store's buffer with its data left as text: the fast path of readers that decode
    /// every row (a replay, a resume, `reel events`), with no copy and no JSON tree per row.
    fn read_journal_raw(
        &self,
        run: &str,
        from_seq: u64,
        f: &mut dyn FnMut(RawJournalRow<'_>) -> Flow,
    ) -> Result<(), StoreError> {
        // A store without a borrowed path gives its parsed rows back as text.
        self.read_journal_rows(run, from_seq, &mut |row| match row {
            JournalRow::Event(e) => match serde_json::to_string(&e.data) {
                Ok(data) => f(RawJournalRow::Event(RawEventRow {
                    seq: e.seq,
                    at: e.at,
                    kind: &e.kind,
                    step: e.step.as_deref(),
                    index: e.index,
                    attempt: e.attempt,
                    data: &data,
                })),
                Err(err) => f(RawJournalRow::Hole {
                    seq: e.seq,
                    message: &err.to_string(),
                }),
            },
            JournalRow::Hole { seq, message } => f(RawJournalRow::Hole {
                seq,
                message: &message,
            }),
        })
    }
    /// The steps a run's journal records as succeeded. A resume reads these first so that its
    /// fold can pass over their calls' records (nothing will use them) instead of holding
    /// them until each step's end is read: a long `foreach` would otherwise cost memory in
    /// proportion to its calls.
    fn succeeded_steps(&self, run: &str) -> Result<HashSet<String>, StoreError> {
        let mut out = HashSet::new();
        self.read_journal(run, 0, &mut |row| {
            if row.kind == "step_succeeded"
                && let Some(step) = row.step
            {
                out.insert(step);
            }
            Flow::Continue
        })?;
        Ok(out)
    }
    /// Every `unknown_outcome` row of the store whose columns read, ordered by run and then
    /// by position: what `reel runs` shows of each run without reading its journal. A
    /// database finds them through an index of such rows, so the read costs what it finds,
    /// not the store's events; the default reads every run's journal.
    fn unknown_outcome_rows(&self) -> Result<Vec<EventRow>, StoreError> {
        let mut runs = self.list_runs(&RunFilter::default())?;
        runs.sort_by(|a, b| a.id.cmp(&b.id));
        let mut out = Vec::new();
        for run in runs {
            self.read_journal_rows(&run.id, 0, &mut |row| {
                if let JournalRow::Event(e) = row
                    && e.kind == UNKNOWN_OUTCOME
                {
                    out.push(e);
                }
                Flow::Continue
            })?;
        }
        Ok(out)
    }
    /// What a run's tools printed, in order.
    fn logs(&self, run: &str) -> Result<Vec<LogRow>, StoreError>;
    /// A run's signals that nothing consumed yet, in the order sent.
    fn pending_signals(&self, run: &str) -> Result<Vec<SignalRow>, StoreError>;
    /// A run's signals named in `names` that nothing consumed yet, in the order sent, each
    /// with its payload (`None` when the value is gone). The default reads the signals and
    /// then their payloads; a database reads both at once.
    fn pending_signals_with_payloads(
        &self,
        run: &str,
        names: &[String],
    ) -> Result<Vec<(SignalRow, Option<Value>)>, StoreError> {
        let rows: Vec<SignalRow> = self
            .pending_signals(run)?
            .into_iter()
            .filter(|s| names.contains(&s.name))
            .collect();
        let digests: Vec<&str> = rows.iter().map(|s| s.payload_digest.as_str()).collect();
        let payloads = self.get_values(&digests)?;
        Ok(rows.into_iter().zip(payloads).collect())
    }
    /// Runs a worker should take up: waiting with a due timer or a pending signal, or running
    /// with an expired lease.
    fn due_runs(&self, now_ms: i64, limit: usize) -> Result<Vec<String>, StoreError>;
    /// The earliest time a waiting run's timer is due (ms since the epoch), if any waits on
    /// one: an idle worker sleeps until then rather than a whole poll. A store shared by many
    /// machines also counts the time a held run's lease runs out (or ran out, for a run no
    /// claim could take yet), so that a run whose process died elsewhere is taken over then
    /// (on one machine a dead holder is seen at once). A time already past means something is
    /// due that a look did not take. The default knows of none.
    fn next_due(&self) -> Result<Option<i64>, StoreError> {
        Ok(None)
    }
    /// Runs one SQL statement that only reads (`reel sql`), typically over the `reel_*` views,
    /// and returns all its rows. A statement that would write is refused
    /// ([`StoreError::QueryWrites`]), a bad one gets the database's message
    /// ([`StoreError::Query`]); one that runs past `limits.timeout` is stopped
    /// ([`StoreError::QueryTimeout`]), on PostgreSQL by the server itself, which also stops it
    /// when the process that asked is gone; one that answers more than `limits.max_rows` rows
    /// is stopped there ([`StoreError::QueryRows`]) rather than held whole. A store with no
    /// database to ask says so.
    fn query(&self, sql: &str, limits: QueryLimits) -> Result<QueryAnswer, StoreError> {
        let _ = (sql, limits);
        Err(StoreError::Query(
            "this store has no database to run SQL on".to_string(),
        ))
    }
}

/// What one `reel sql` query may cost: a query is typed by a person or a script against a
/// store others may be writing to, and one that never ends, or answers without end, must
/// neither hold the shared server nor fill this process's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueryLimits {
    /// How long the query may run; `None`: as long as it takes.
    pub timeout: Option<std::time::Duration>,
    /// How many rows it may answer; `None`: as many as it has.
    pub max_rows: Option<usize>,
}

impl QueryLimits {
    /// No limit: what a caller that knows its query uses.
    pub const NONE: QueryLimits = QueryLimits {
        timeout: None,
        max_rows: None,
    };
}

/// What a read-only query answered: its columns' names and its rows, each value as JSON (SQL
/// NULL as `null`, integers and reals as numbers, text as strings).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct QueryAnswer {
    /// The columns' names, in order.
    pub columns: Vec<String>,
    /// The rows, each with one value per column.
    pub rows: Vec<Vec<Value>>,
}

/// The whole store: reading and writing. Writes are enqueued in order (per process) and
/// committed in batches; a run's rows land in order, and a later row never lands without the
/// earlier ones.
pub trait Store: StoreRead {
    /// Stores a value under its name (`reel_flowspec::canonical::name_text`) and returns the
    /// name: a short value is its own name and is not written; any other is stored once by the
    /// SHA-256 of its canonical JSON, however often stored, and over 64 KiB kept apart from the
    /// database, by digest.
    fn put_value(&self, value: &Value) -> Result<String, StoreError> {
        let text = reel_flowspec::canonical::canonical_json(value);
        self.put_named(text).map(|(name, _)| name)
    }
    /// Names the value whose canonical JSON is `text` and stores it unless it is its own name;
    /// returns the name and, for a stored value, what to hand to the write of the rows that
    /// name it ([`Kept`]).
    fn put_named(&self, text: String) -> Result<(String, Option<Kept>), StoreError> {
        let name = reel_flowspec::canonical::name_text(&text);
        if reel_flowspec::canonical::literal(&name).is_some() {
            return Ok((name, None));
        }
        let kept = self.put_canonical(&name, text)?;
        Ok((name, Some(kept)))
    }
    /// Stores a value given as its canonical JSON `text` and that text's `digest` (what
    /// `reel_flowspec::canonical` gives), for a caller that has both already: the value is not
    /// written out again.
    /// Returns what to hand to the write of the rows that name it ([`Kept`]).
    fn put_canonical(&self, digest: &str, text: String) -> Result<Kept, StoreError>;
    /// Stores a FlowSpec's JSON by its digest; returns what to hand to the run that names it.
    fn put_spec(&self, digest: &str, json: &str) -> Result<Kept, StoreError>;
    /// Keeps the binary form of a FlowSpec already stored by [`Store::put_spec`], unless the
    /// store has it in this build's layout (a store looks once per spec); it is written after
    /// the call returns, and a store that keeps no binary forms does nothing.
    fn keep_spec_binary(&self, _spec: &FlowSpec) -> Result<(), StoreError> {
        Ok(())
    }

    /// Creates a run leased to `owner`; returns when it is committed.
    fn create_run(&self, run: NewRun, owner: &Owner, lease_ms: u64) -> Result<Lease, StoreError>;
    /// Takes the lease of a run whose holder is gone (dead process or expired lease) or that
    /// nobody holds; returns when committed.
    fn claim_run(&self, run: &str, owner: &Owner, lease_ms: u64) -> Result<Claim, StoreError>;
    /// Claims up to `limit` of the runs a worker should take up (those [`StoreRead::due_runs`]
    /// finds at `now_ms`), leaving out the runs in `skip` (the caller's own, and those it waits
    /// out): each such run is taken by exactly one claimer however many ask at once. The
    /// default claims them one at a time with [`Self::claim_run`]; a store shared by many
    /// processes claims them in one statement that passes over the rows another claimer is
    /// taking, so that claimers never wait for each other.
    fn claim_due(
        &self,
        now_ms: i64,
        owner: &Owner,
        lease_ms: u64,
        limit: usize,
        skip: &HashSet<String>,
    ) -> Result<Vec<DueClaim>, StoreError> {
        let mut claimed = Vec::new();
        for run in self.due_runs(now_ms, limit.saturating_add(skip.len()))? {
            if claimed.len() >= limit {
                break;
            }
            if skip.contains(&run) {
                continue;
            }
            let Some(was) = self.run(&run)?.map(|r| r.status) else {
                continue;
            };
            if let Claim::Claimed(lease) = self.claim_run(&run, owner, lease_ms)?
                && let Some(claim) = due_claim(self, lease, was)?
            {
                claimed.push(claim);
            }
        }
        Ok(claimed)
    }

    /// A worker's look: claims as [`Self::claim_due`] does (none when `limit` is 0), then tells
    /// when to look next as [`StoreRead::next_due`] would right after. The default asks the
    /// two apart; a database asks both in one statement, since every idle worker looks each
    /// time a signal is announced.
    fn look(
        &self,
        now_ms: i64,
        owner: &Owner,
        lease_ms: u64,
        limit: usize,
        skip: &HashSet<String>,
    ) -> Result<Look, StoreError> {
        let claims = if limit > 0 {
            self.claim_due(now_ms, owner, lease_ms, limit, skip)?
        } else {
            Vec::new()
        };
        Ok(Look {
            claims,
            next_due: self.next_due()?,
        })
    }
    /// Extends a held lease; `LeaseLost` when it was taken over.
    fn renew(&self, lease: &Lease, lease_ms: u64) -> Result<(), StoreError>;
    /// Gives the lease up (after parking or ending), after everything enqueued for the run
    /// before it and in the same transaction when it can be (no separate [`Store::sync`] is
    /// needed first); resolves when committed, with the error of any of those writes.
    fn release(&self, lease: &Lease) -> Ticket;

    /// Enqueues events for the lease's run, numbering them from `lease.next_seq`, with what
    /// they name that this process stored just before ([`Kept`]): committed together.
    fn append_kept(
        &self,
        lease: &Lease,
        events: Vec<NewEvent>,
        kept: Vec<Kept>,
    ) -> Result<(), StoreError>;
    /// Enqueues events that name nothing this process stored just before.
    fn append(&self, lease: &Lease, events: Vec<NewEvent>) -> Result<(), StoreError> {
        self.append_kept(lease, events, Vec::new())
    }
    /// Enqueues a change to the run's row, after the events enqueued before it.
    fn update_run(&self, lease: &Lease, update: RunUpdate) -> Result<(), StoreError>;
    /// Enqueues what a tool printed.
    fn append_log(&self, lease: &Lease, log: LogRow) -> Result<(), StoreError>;
    /// Marks a signal consumed by journal event `by`.
    fn consume_signal(&self, lease: &Lease, seq: u64, by: u64) -> Result<(), StoreError>;
    /// Resolves when everything enqueued so far for the lease's run is committed (or failed).
    fn sync(&self, lease: &Lease) -> Ticket;

    /// Records a signal for a run (kept until its wait consumes it); returns its number.
    fn send_signal(&self, run: &str, name: &str, payload: &Value) -> Result<u64, StoreError>;
    /// Asks a run to stop; false when it had already ended.
    fn request_cancel(&self, run: &str) -> Result<bool, StoreError>;

    /// Removes the ended runs `scope` names with everything only they use: journal rows,
    /// signals, logs, and the values, blob files and FlowSpecs no remaining run references.
    /// Each run is judged by its state in the transaction that deletes it, so a run that has
    /// not ended is never touched. A `dry_run` removes nothing and says what would go.
    fn clean(&self, scope: &CleanScope, dry_run: bool) -> Result<Cleaned, StoreError>;
}

/// One run with everything it holds but its values and FlowSpec (which are stored by digest and
/// copied as such): what `reel store copy` moves from one store to another.
#[derive(Clone, Debug, PartialEq)]
pub struct RunExport {
    /// The run's row, lease and status included.
    pub row: RunRow,
    /// Its journal, in order.
    pub events: Vec<EventRow>,
    /// Every signal sent to it, consumed or not, in order.
    pub signals: Vec<SignalRow>,
    /// What its tools printed, in order.
    pub logs: Vec<LogRow>,
}
